"""iRPE, image relative position encoding (Wu et al., ICCV 2021): an offset x = pos_i - pos_j (token-grid units)
maps to a bucket by the paper's g (Eq. 18), (alpha, beta, gamma) = ratio * (1, 2, 8), b = int(beta):

    g(x) = round(x)                                                                  if |x| <= alpha
    g(x) = sign(x) * min(beta, round(alpha + ln(|x| / alpha) / ln(gamma / alpha) * (beta - alpha)))  otherwise
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
    return 1.0 * ratio, 2.0 * ratio, 8.0 * ratio


def piecewise_index(x: torch.Tensor, alpha: float, beta: float, gamma: float) -> torch.Tensor:
    """g(x) elementwise, in float32: a long tensor in [-b, b]."""
    x = x.float()
    ax = x.abs()
    # the clamp keeps log() finite on the |x| <= alpha entries, which torch.where discards anyway
    far = alpha + torch.log(ax.clamp(min=alpha) / alpha) / math.log(gamma / alpha) * (beta - alpha)
    far = torch.sign(x) * far.round().clamp(max=int(beta))
    return torch.where(ax <= alpha, x.round(), far).long()


def num_buckets(method: str, ratio: float) -> int:
    """Buckets of one table, without the prefix bucket."""
    b = int(piecewise_coefficients(ratio)[1])
    return {'product': (2 * b + 1) ** 2, 'cross': 2 * b + 1, 'euclidean': b + 1, 'quant': b + 1}[method]


def bucket_ids_from_coords(coords: torch.Tensor, method: str, ratio: float, num_prefix: int = 0) -> Buckets:
    """Buckets of every offset pos_i - pos_j of (..., N, 2) (row, col) coordinates: (..., P+N, P+N) long; ``cross``
    returns (rows, cols)."""
    parts = bucket_parts(coords, method, ratio, num_prefix)
    return (parts[0], parts[1]) if method == 'cross' else parts[0]


def bucket_parts(coords: torch.Tensor, method: str, ratio: float, num_prefix: int = 0) -> tuple[torch.Tensor, ...]:
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
    return bucket_ids_from_coords(grid_coords(h, w), method, ratio, num_prefix)


def _check_args(method: str, mode: str, on: str, ratio: float) -> str:
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
    shape = like.shape
    return idx.unsqueeze(-3).expand(shape[0], shape[1], shape[2], idx.shape[-1])


@ENCODINGS.register_module(name='irpe')
class IRPE(Encoding):
    """iRPE on keys (default), queries and / or values, one instance per attention layer; tables zero at init.

        K: logits_ij += scale * q_i . W_k[bucket(i, j)]   Q: logits_ij += scale * k_j . W_q[bucket(j, i)]
        bias: logits_ij += w[bucket(i, j)]                  V: out_i += sum_j a_ij W_v[bucket(i, j)]

    with scale = d^-0.5; (q * scale) @ W^T is gathered at the (N, N) bucket ids, never an N x N x d tensor.

    Args:
        dim: model width.
        num_heads: attention heads.
        method: buckets of (g(dr), g(dc)) ('product'), g(dr) + g(dc) tables ('cross'), g(round(|d|)) ('euclidean') or
            g(|d|^2) ('quant'); pairs with a prefix token share one more.
        mode: 'contextual', a learned vector per bucket; 'bias', a scalar per bucket (on 'k' only).
        on: any of 'q', 'k', 'v'.
        shared_heads: one table for all heads; False: one per head.
        ratio: scales (alpha, beta, gamma); 1.9 gives b = 3.
    """

    has_score_term = True
    attn_weights_option = "'v' in on"

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
        if self.method != 'cross':
            return self.tables[side]
        axis = -2 if self.mode == 'contextual' else -1
        return torch.cat([self.tables[side + '_rows'], self.tables[side + '_cols']], dim=axis)

    def buckets(self, pos: Positions, num_tokens: int) -> tuple[torch.Tensor, ...]:
        """Cached bucket ids: an (N, N) or (B, N, N) long tensor per cross part."""
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
        """scale * x . W_side for every bucket: (B, H, n, buckets)."""
        weight = (self.table(side) * self.scale).to(x.dtype)  # scaling the small table, not x: same product
        return x @ weight.transpose(-1, -2)

    @staticmethod
    def gather(lookup: torch.Tensor, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """out[b, h, i, j] = lookup[b, h, i, ids[i, j]], summed over the cross parts."""
        out = lookup.gather(-1, _expand(ids[0], lookup))
        for idx in ids[1:]:
            out = out + lookup.gather(-1, _expand(idx, lookup))
        return out

    def contextual(self, x: torch.Tensor, side: str, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.gather(self.lookup(x, side), ids)

    def scalar_bias(self, ids: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Bias mode: w[ids] -> (1 or B, H or 1, n, N)."""
        table = self.table('k')
        out = table[..., ids[0]]  # (n, N) shared, (H, n, N) per head (+ B after H)
        for idx in ids[1:]:
            out = out + table[..., idx]
        out = out.unsqueeze(-3) if self.shared_heads else out.movedim(0, -3)
        return out if out.dim() == 4 else out.unsqueeze(0)

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> ScoreTerm:
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
        return self.logit_bias_rows(q, k, pos)(slice(None))

    def logit_bias_rows(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> Callable[[slice], torch.Tensor]:
        """rows -> the logit terms of those query rows, (B or 1, H or 1, n, N)."""
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
        """sum_j a_ij W_v[bucket(i, j)] of the query rows ``rows``, (B, H, n, d)."""
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
