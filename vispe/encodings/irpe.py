"""Image relative position encoding, iRPE (Wu et al., "Rethinking and Improving Relative Position Encoding for
Vision Transformer", ICCV 2021).

A relative offset pos_i - pos_j between query token i and key token j (token-grid units, (row, col)) maps to a
bucket through the piecewise function g of the paper (Eq. 18), with (alpha, beta, gamma) = ratio * (1, 2, 8):

    g(x) = round(x)                                                                  if |x| <= alpha
    g(x) = sign(x) * min(beta, round(alpha + ln(|x| / alpha) / ln(gamma / alpha) * (beta - alpha)))  otherwise

so |g| <= b = int(beta): exact for small offsets, logarithmic further out, saturating at b. Methods, as in the
reference code: ``product`` buckets the pair (g(dr), g(dc)) ((2b + 1)^2 buckets); ``cross`` keeps two tables,
g(dr) and g(dc), and sums them (2b + 1 buckets each); ``euclidean`` buckets g(round(sqrt(dr^2 + dc^2))) and
``quant`` g(dr^2 + dc^2) (distances are >= 0, so b + 1 buckets; the reference allocates 2b + 1 of which only
these are reachable). Any pair involving a prefix (cls / register) token uses one extra bucket, the last one.
Bucket tables depend only on the grid: they are cached per grid, prefix count and device, never checkpointed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache, check_heads
from vispe.flex import ScoreTerm
from vispe.positions import Positions, grid_coords, is_symbolic
from vispe.registry import ENCODINGS

METHODS = ('product', 'cross', 'euclidean', 'quant')
MODES = ('contextual', 'bias')
SIDES = 'qkv'
Buckets = torch.Tensor | tuple[torch.Tensor, torch.Tensor]

#: bucket tables shared by every layer (they are a pure function of the grid and the settings)
_BUCKETS = GridTableCache(max_entries=16)


def piecewise_coefficients(ratio: float) -> tuple[float, float, float]:
    """(alpha, beta, gamma) = ratio * (1, 2, 8), as in the paper."""
    return 1.0 * ratio, 2.0 * ratio, 8.0 * ratio


def piecewise_index(x: torch.Tensor, alpha: float, beta: float, gamma: float) -> torch.Tensor:
    """g(x) elementwise, computed in float32 whatever the input (or autocast) dtype: a long tensor in [-b, b].

    min(beta, round(.)) of an integer is min(int(beta), round(.)), which is what the reference's
    ``clip(max=beta).to(long)`` gives.
    """
    x = x.float()
    ax = x.abs()
    # the clamp keeps log() finite on the |x| <= alpha entries, which torch.where discards anyway
    far = alpha + torch.log(ax.clamp(min=alpha) / alpha) / math.log(gamma / alpha) * (beta - alpha)
    far = torch.sign(x) * far.round().clamp(max=int(beta))
    return torch.where(ax <= alpha, x.round(), far).long()


def num_buckets(method: str, ratio: float) -> int:
    """Buckets of one table, without the prefix bucket: (2b+1)^2 product, 2b+1 cross, b+1 euclidean / quant."""
    b = int(piecewise_coefficients(ratio)[1])
    return {'product': (2 * b + 1) ** 2, 'cross': 2 * b + 1, 'euclidean': b + 1, 'quant': b + 1}[method]


def bucket_ids_from_coords(coords: torch.Tensor, method: str, ratio: float, num_prefix: int = 0) -> Buckets:
    """Bucket indices of every token pair from (..., N, 2) (row, col) coordinates: (..., P+N, P+N) long.

    Entry (i, j) buckets the offset pos_i - pos_j; rows and columns of prefix tokens hold the prefix bucket
    ``num_buckets(method, ratio)``. ``cross`` returns (rows, cols), one index per table.
    """
    parts = bucket_parts(coords, method, ratio, num_prefix)
    return (parts[0], parts[1]) if method == 'cross' else parts[0]


def bucket_parts(coords: torch.Tensor, method: str, ratio: float, num_prefix: int = 0) -> tuple[torch.Tensor, ...]:
    """``bucket_ids_from_coords`` as a tuple whatever the method: (rows, cols) for ``cross``, one tensor else."""
    alpha, beta, gamma = piecewise_coefficients(ratio)
    b = int(beta)
    diff = coords.float()[..., :, None, :] - coords.float()[..., None, :, :]  # (..., N, N, 2)
    dr, dc = diff.unbind(-1)
    g = lambda t: piecewise_index(t, alpha, beta, gamma)  # noqa: E731
    ids: tuple[torch.Tensor, ...]
    if method == 'product':
        ids = ((g(dr) + b) * (2 * b + 1) + g(dc) + b,)
    elif method == 'cross':
        ids = (g(dr) + b, g(dc) + b)
    elif method == 'euclidean':  # the reference rounds the distance before g
        ids = (g(diff.square().sum(-1).sqrt().round()),)
    elif method == 'quant':
        ids = (g(diff.square().sum(-1)),)
    else:
        raise ValueError(f'unknown iRPE method {method!r}; choose one of {list(METHODS)}')
    prefix = num_buckets(method, ratio)
    return tuple(
        F.pad(t, (num_prefix, 0, num_prefix, 0), value=float(prefix)) for t in ids
    )  # float: as TorchScript's pad


def bucket_ids(h: int, w: int, method: str, ratio: float = 1.9, num_prefix: int = 0) -> Buckets:
    """Bucket indices of an h x w grid with ``num_prefix`` tokens in front: (P + h*w, P + h*w) long (a pair
    for ``cross``)."""
    return bucket_ids_from_coords(grid_coords(h, w), method, ratio, num_prefix)


def _check_args(method: str, mode: str, on: str, ratio: float) -> str:
    """Validate the constructor's choices; return ``on`` in q, k, v order."""
    if method not in METHODS:
        raise ValueError(f'unknown iRPE method {method!r}; choose one of {list(METHODS)}')
    if mode not in MODES:
        raise ValueError(f'unknown iRPE mode {mode!r}; choose one of {list(MODES)}')
    if not isinstance(on, str) or not on or set(on) - set(SIDES):
        raise ValueError(f"iRPE 'on' is a non-empty string of 'q', 'k', 'v' (e.g. 'k', 'qkv'), got {on!r}")
    if mode == 'bias' and on.replace('k', ''):
        raise ValueError(
            f"iRPE mode='bias' adds one scalar per bucket to the logits, so it takes on='k' only (got on={on!r}); "
            "use mode='contextual' for 'q' or 'v'"
        )
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.5 <= ratio < math.inf:
        raise ValueError(f'iRPE ratio must be a number >= 0.5 (beta = 2 * ratio sets int(beta) >= 1), got {ratio!r}')
    return ''.join(s for s in SIDES if s in on)


def _expand(idx: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(N, N) or (B, N, N) indices -> a (B, H, N, M) view (no copy) for gather / scatter on the 4-D ``like``.

    A head axis goes in front of the last two either way ((1, N, N) or (B, 1, N, N)), so no branch on the rank,
    which an FX trace cannot take."""
    shape = like.shape
    return idx.unsqueeze(-3).expand(shape[0], shape[1], shape[2], idx.shape[-1])


@ENCODINGS.register_module(name='irpe')
class IRPE(Encoding):
    """iRPE (Wu et al., ICCV 2021) on keys (default), queries and / or values, one instance per attention layer.

    Args:
        dim: model width.
        num_heads: attention heads (head dim d = dim / num_heads).
        method: 'product', 'cross', 'euclidean' or 'quant' (see the module docstring).
        mode: 'contextual': a learned vector r per bucket, interacting with q, k or the attention; 'bias': a learned
            scalar per bucket added to the logits, which only makes sense on 'k'.
        on: any of 'q', 'k', 'v' ('qkv' all three).
        shared_heads: True: one table for all heads; False: one per head.
        ratio: scales (alpha, beta, gamma) = ratio * (1, 2, 8); 1.9 gives b = 3.

    Terms (scale = d^-0.5; the reference scales q before the contextual term):
        K: logits_ij += scale * q_i . W_k[bucket(i, j)]   Q: logits_ij += scale * k_j . W_q[bucket(j, i)]
        bias: logits_ij += w[bucket(i, j)]                  V: out_i += sum_j a_ij W_v[bucket(i, j)]

    Shapes: q, k, v (B, H, N, d), N counting prefix tokens. ``logit_bias`` returns (B, H, N, N) in contextual
    mode, computed as (q * scale) @ W^T -> (B, H, N, buckets) then a gather with the (N, N) bucket table (never
    an N x N x d tensor); (1, H or 1, N, N) in bias mode. ``value_term`` returns (B, H, N, d): the softmax
    weights are scatter-added into per-bucket sums (B, H, N, buckets), then multiplied by W_v.
    Tables (zero-initialised, as in the paper): contextual (buckets, d) shared or (H, buckets, d) per head;
    bias (buckets,) or (H, buckets); buckets = ``num_buckets(method, ratio) + 1`` (the prefix bucket); 'cross'
    has a '_rows' and a '_cols' table for each side.

    Weight decay: nothing to declare. The reference code (DeiT-with-iRPE) keeps only the absolute table and the
    cls token out of decay, so its lookup tables are decayed like DeiT's other weights; a shared-head bias table
    here is 1-D (buckets,) and, like every 1-D parameter, takes none.

    SDPA path: Q / K / bias give a float attn_mask, so attention stays on PyTorch's
    ``scaled_dot_product_attention`` (on CPU in training it takes the math backend, as for any mask that needs
    a gradient). On V the term needs the softmax weights: ``needs_attn_weights`` is then True and the
    attention materialises softmax(q k^T / sqrt(d) + bias), disabling fused SDPA for that layer.

    Attention path: the bias (and the contextual q . W term on K) goes to SDPA as a float attn_mask: the
    memory-efficient kernel with a bias on CUDA, never flash; on V (on='qkv') the softmax weights are materialised
    (math path).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), bucket tables come from a module-level
    ``GridTableCache`` (a Python dict with tuple keys, filled by a closure), ``logit_bias_rows`` returns a closure,
    which TorchScript cannot return, and its hook set and ``needs_attn_weights`` are per instance (``on`` decides them).

    Large grids: past the attention's byte budget (``vispe.attention``) the attention asks ``logit_bias_rows`` for
    the bias of a slice of queries at a time, and ``value_term`` gets those rows' weights with ``rows=``: then
    nothing is N x N but the cached (N, N) bucket table; the Q side's (B, H, N, buckets) key lookup is made once
    per forward. On V the weights are then materialised a slice of rows at a time, so 'qkv' is bounded too.
    """

    has_score_term = True

    def __init__(
        self,
        dim: int,
        num_heads: int,
        method: str = 'product',
        mode: str = 'contextual',
        on: str = 'k',
        shared_heads: bool = True,
        ratio: float = 1.9,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads, 'irpe')
        self.on = _check_args(method, mode, on, ratio)
        self.method, self.mode, self.shared_heads, self.ratio = method, mode, bool(shared_heads), float(ratio)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim**-0.5
        #: an instance attribute: only iRPE on V needs the softmax weights (and gives up fused SDPA)
        self.needs_attn_weights = 'v' in self.on
        # the attention calls only the hooks that do work: no value term without 'v', no logit bias for 'v' alone
        self._active = frozenset(
            ({'logit_bias'} if set(self.on) & set('qk') else set()) | ({'value_term'} if 'v' in self.on else set())
        )
        self.num_buckets = num_buckets(method, ratio) + 1
        heads = () if self.shared_heads else (num_heads,)
        shape = (*heads, self.num_buckets) + ((self.head_dim,) if mode == 'contextual' else ())
        parts = ('_rows', '_cols') if method == 'cross' else ('',)
        self.tables = nn.ParameterDict({s + p: nn.Parameter(torch.zeros(shape)) for s in self.on for p in parts})
        self.reset_parameters()

    def active_hooks(self) -> frozenset[str]:
        return self._active

    def reset_parameters(self) -> None:
        for table in self.tables.values():
            nn.init.zeros_(table)

    def extra_repr(self) -> str:
        return f'method={self.method!r}, mode={self.mode!r}, on={self.on!r}, shared_heads={self.shared_heads}'

    def table(self, side: str) -> torch.Tensor:
        """The side's table; for 'cross' rows and cols concatenated along the bucket axis (cols shifted)."""
        if self.method != 'cross':
            return self.tables[side]
        axis = -2 if self.mode == 'contextual' else -1
        return torch.cat([self.tables[side + '_rows'], self.tables[side + '_cols']], dim=axis)

    def buckets(self, pos: Positions, num_tokens: int) -> tuple[torch.Tensor, ...]:
        """Cached bucket indices into ``table(side)``: one (N, N) (or (B, N, N)) long tensor per cross part."""
        if not is_symbolic(pos.ndim) and pos.ndim != 2:  # FX: the coordinates' shape is unknown while tracing
            raise ValueError(f'iRPE buckets 2D (row, col) offsets; these positions have {pos.ndim} dimensions')

        def build() -> tuple[torch.Tensor, ...]:
            ids = bucket_parts(pos.coords, self.method, self.ratio, pos.num_prefix)
            if pos.layout is not None:  # a mixed batch: its prefix tokens sit among the patches
                patch = pos.layout.patch_mask(pos.coords.device)
                pair = patch[:, :, None] & patch[:, None, :]
                prefix = float(num_buckets(self.method, self.ratio))
                ids = tuple(torch.where(pair, t, torch.full_like(t, prefix)) for t in ids)
            if self.method != 'cross':
                return ids
            return ids[0], ids[1] + self.num_buckets  # cols index the second half of the concatenated table

        ids = _BUCKETS.get(pos.cache_key('irpe', self.method, self.ratio), build)
        if not is_symbolic(num_tokens) and ids[0].shape[-1] != num_tokens:  # traced: checked by the eager model
            raise ValueError(
                f'iRPE got {num_tokens} tokens but the positions hold {pos.num_prefix} prefix + '
                f'{pos.num_tokens} grid tokens'
            )
        return ids

    def lookup(self, x: torch.Tensor, side: str) -> torch.Tensor:
        """scale * x . W_side for every bucket: (B, H, n, buckets), one dot per token and bucket."""
        weight = (self.table(side) * self.scale).to(x.dtype)  # scaling the small table, not x: same product
        return x @ weight.transpose(-1, -2)

    @staticmethod
    def gather(lookup: torch.Tensor, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """out[b, h, i, j] = lookup[b, h, i, ids[i, j]], summed over the cross parts: (B, H, n, M)."""
        out = lookup.gather(-1, _expand(ids[0], lookup))
        for idx in ids[1:]:
            out = out + lookup.gather(-1, _expand(idx, lookup))
        return out

    def contextual(self, x: torch.Tensor, side: str, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """out[b, h, i, j] = scale * x_i . W_side[ids[i, j]], summed over the cross parts: (B, H, N, N)."""
        return self.gather(self.lookup(x, side), ids)

    def scalar_bias(self, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """bias mode: w[ids] -> (1, H or 1, n, N), or (B, H or 1, n, N) for per-sample positions."""
        table = self.table('k')
        out = table[..., ids[0]]  # (n, N) shared, (H, n, N) per head (+ B after H)
        for idx in ids[1:]:
            out = out + table[..., idx]
        out = out.unsqueeze(-3) if self.shared_heads else out.movedim(0, -3)
        return out if out.dim() == 4 else out.unsqueeze(0)

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> ScoreTerm:
        """``logit_bias`` inside FlexAttention: the bucket of (q_idx, kv_idx) read from the (N, N) ids, and the
        per-bucket values (bias mode: the table; contextual: scale * q . W_k and scale * k . W_q for every bucket,
        (B, H, N, buckets), the lookups the SDPA path gathers from) read at it: no (B, H, N, N) tensor."""
        ids = self.buckets(pos, q.shape[-2])
        per_sample = ids[0].dim() == 3  # sampled positions: ids (B, N, N)

        def bucket(idx: torch.Tensor, b, i, j) -> torch.Tensor:
            return idx[b, i, j] if per_sample else idx[i, j]

        if self.mode == 'bias':
            table, shared = self.table('k'), self.shared_heads

            def bias_term(b, h, q_idx, kv_idx):
                parts = [table[bucket(idx, b, q_idx, kv_idx)] if shared else table[h, bucket(idx, b, q_idx, kv_idx)]
                         for idx in ids]  # fmt: skip
                return sum(parts[1:], parts[0])

            return bias_term
        on_q = self.lookup(q, 'k') if 'k' in self.on else None  # (B, H, N, buckets): q_i . W_k[bucket]
        on_k = self.lookup(k, 'q') if 'q' in self.on else None  # k_j . W_q[bucket(j, i)]

        def contextual_term(b, h, q_idx, kv_idx):
            parts = []
            for idx in ids:
                if on_q is not None:
                    parts.append(on_q[b, h, q_idx, bucket(idx, b, q_idx, kv_idx)])
                if on_k is not None:
                    parts.append(on_k[b, h, kv_idx, bucket(idx, b, kv_idx, q_idx)])
            return sum(parts[1:], parts[0])

        return contextual_term

    def logit_bias(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> torch.Tensor:
        """Logit terms for the K side (on q) and the Q side (on k, transposed): (B or 1, H or 1, N, N)."""
        return self.logit_bias_rows(q, k, pos)(slice(None))

    def logit_bias_rows(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> Callable[[slice], torch.Tensor]:
        """rows -> the logit terms of the query rows ``rows`` alone: (B or 1, H or 1, n, N). The K side needs the
        rows' queries only; the Q side's (B, H, N, buckets) key lookup is computed once, here, for every chunk."""
        ids = self.buckets(pos, q.shape[-2])
        if self.mode == 'bias':
            return lambda rows: self.scalar_bias(tuple(idx[..., rows, :] for idx in ids))
        keys = self.lookup(k, 'q') if 'q' in self.on else None  # (B, H, N, buckets)

        def rows_of(rows: slice) -> torch.Tensor:
            bias = None
            if 'k' in self.on:
                bias = self.gather(self.lookup(q[..., rows, :], 'k'), tuple(idx[..., rows, :] for idx in ids))
            if keys is not None:
                # scale * k_j . W_q[bucket(j, i)] for the rows' queries i: columns ``rows`` of the table, then swap
                on_q = self.gather(keys, tuple(idx[..., :, rows] for idx in ids)).transpose(-1, -2)
                bias = on_q if bias is None else bias + on_q
            assert bias is not None  # the hook is active only with 'q' or 'k' in on (__init__)
            return bias

        return rows_of

    def value_term(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor | None = None, rows: slice = slice(None)
    ) -> torch.Tensor:
        """sum_j a_ij W_v[bucket(i, j)] -> (B, H, n, d), from the (B, H, n, N) softmax weights ``attn`` of the query
        rows ``rows`` (all N by default)."""
        if attn is None:
            raise ValueError('iRPE on V needs the softmax weights: the attention passes them when needs_attn_weights')
        ids = self.buckets(pos, v.shape[-2])
        weight = self.table('v')
        sums = attn.new_zeros(*attn.shape[:-1], weight.shape[-2])  # (B, H, n, buckets): attention per bucket
        for idx in ids:
            sums.scatter_add_(-1, _expand(idx[..., rows, :], attn), attn)
        return (sums @ weight.to(sums.dtype)).to(v.dtype)


__all__ = [
    'IRPE',
    'METHODS',
    'MODES',
    'bucket_ids',
    'bucket_ids_from_coords',
    'bucket_parts',
    'num_buckets',
    'piecewise_coefficients',
    'piecewise_index',
]
