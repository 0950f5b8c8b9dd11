"""The one attention module every vispe backbone uses, with the encoding hooks at fixed points.

qkv -> q/k norm -> rotate (and transform_v) -> SDPA(attn_mask = sum of logit biases) or FlexAttention -> transform_out
-> + value terms -> proj. Parameter names match timm's ``Attention``. When the (B, H, N, N) bias would pass the byte
budget (``bias_budget``, else ``BIAS_BUDGET_BYTES``), eager attention runs ``query_rows`` queries at a time, each chunk
checkpointed under autograd, with the one-shot path's results to float tolerance."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.fx
import torch.nn.functional as F
from timm.layers import Attention as TimmAttention
from torch import nn
from torch.utils.checkpoint import checkpoint

from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.stack import EncodingStack
from vispe.flex import check_kernel, choose_kernel, flex_attend, why_not_flex
from vispe.positions import Positions

#: default byte budget of the (B, H, N, N) logit bias above which attention runs in query chunks; set
#: ``Attention.bias_budget`` on a module to override it there (``float('inf')``: never chunk)
BIAS_BUDGET_BYTES = 1 << 30
#: what the hooks would receive for an attention called without positions, which runs no hook (its stack is empty)
NO_POSITIONS = Positions(coords=torch.empty(0, 0))


class Attention(nn.Module):
    """Multi-head self-attention with positional-encoding hooks.

    Args:
        dim: model width.
        num_heads: heads, dividing ``dim``.
        encodings: per-layer encoding instances, keyed by registry name (stored under ``pe``).

    The other arguments are timm's ``Attention``'s; ``qk_norm`` and ``scale_norm`` need ``norm_layer``.
    """

    #: byte budget of this module's (B, H, N, N) logit bias above which it runs in query chunks (module docstring);
    #: None: the module default ``BIAS_BUDGET_BYTES``
    bias_budget: float | None = None
    #: which kernel a call with logit-bias encodings takes: 'auto', 'sdpa' or 'flex' (``vispe.flex``); set it with
    #: ``set_attention_kernel`` (or the ViT's ``attention_kernel`` argument)
    attention_kernel: str = 'auto'

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        scale_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: Callable[[int], nn.Module] | None = None,
        encodings: Mapping[str, Encoding] | nn.ModuleDict | None = None,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads, 'Attention')
        if (qk_norm or scale_norm) and norm_layer is None:
            raise ValueError('qk_norm and scale_norm need a norm_layer')

        def norm(on: bool, width: int) -> nn.Module:
            return norm_layer(width) if on and norm_layer is not None else nn.Identity()

        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm(qk_norm, self.head_dim)
        self.k_norm = norm(qk_norm, self.head_dim)
        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = norm(scale_norm, dim)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.pe = nn.ModuleDict(dict(encodings or {}))

    @classmethod
    def from_timm(cls, attn: nn.Module, encodings: Mapping[str, Encoding] | nn.ModuleDict | None = None) -> Attention:
        """Take over a timm ``Attention``'s submodules (weights included) and add encodings."""
        if type(attn) is not TimmAttention or getattr(attn, 'gate', None) is not None:
            raise TypeError(
                'vispe can convert blocks whose attention is timm.layers.Attention without a gate; this model uses '
                f'{type(attn).__module__}.{type(attn).__name__}. Pick a plain ViT (vit_*, deit_*) or build '
                'vispe.Attention into the model yourself.'
            )
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.num_heads, new.head_dim = attn.num_heads, attn.head_dim
        for name in ('qkv', 'q_norm', 'k_norm', 'attn_drop', 'norm', 'proj', 'proj_drop'):
            setattr(new, name, getattr(attn, name))
        new.pe = nn.ModuleDict(dict(encodings or {}))
        return new.train(attn.training)

    @property
    def stack(self) -> EncodingStack:
        return EncodingStack(self.pe)

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + mask), with dropout in training: (B, H, N, N)."""
        logits = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
        if is_causal:
            n = logits.shape[-1]
            causal = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
            logits = logits.masked_fill(causal, float('-inf'))
        if attn_mask is not None:
            logits = (
                logits.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else logits + attn_mask
            )
        return self.attn_drop(logits.softmax(dim=-1))

    def query_rows(self, q: torch.Tensor, k: torch.Tensor) -> int:
        """Queries per chunk: all N when the (B, H, N, M) bias fits the byte budget, else as many as fit (>= 1)."""
        budget = BIAS_BUDGET_BYTES if self.bias_budget is None else self.bias_budget
        B, H, N = q.shape[:3]
        row_bytes = B * H * k.shape[-2] * q.element_size()
        return N if row_bytes * N <= budget else max(1, int(budget // row_bytes))

    def forward(
        self,
        x: torch.Tensor,
        pos: Positions | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)  # (B, H, N, d) each
        stack = self.stack
        if pos is None:  # no positions: an empty stack, every phase the identity (nothing reads the positions)
            stack, pos = EncodingStack(), NO_POSITIONS
        q, k = stack.rotate(q, k, pos)
        v = stack.transform_v(v, pos)
        # encodings that sum over the attention weights themselves (iRPE on V) get them materialised, only here
        biased, weighted = bool(stack.with_hook('logit_bias')), bool(stack.weighted())
        layout = pos.layout  # a mixed-size batch: attn_mask is its layout's, one segment per image
        masked = (attn_mask is not None and layout is None) or is_causal  # a caller's own mask
        chunk = (biased or weighted) and may_chunk(N)
        rows = self.query_rows(q, k) if chunk else N
        terms: list[torch.Tensor] = []  # the value terms computed beside the softmax weights (iRPE on V)
        if (biased or layout is not None) and self.flex_call(q, stack, weighted, layout is not None, masked):
            # the biases added inside the kernel, the images kept apart by a block-sparse mask (blocks skipped)
            score_terms = stack.score_terms(q, k, pos) if biased else []
            block_mask = layout.block_mask(q.device) if layout is not None else None
            out = flex_attend(q, k, v, score_terms, block_mask)
        elif chunk and rows < N:
            out, terms = self.chunked(q, k, v, pos, stack, weighted, attn_mask, is_causal, rows)
        else:
            if biased:
                bias = stack.logit_biases(q, k, pos)  # (B or 1, H, N, N) each
                attn_mask, is_causal = full_mask(bias, attn_mask, is_causal, q, k), False
            out, terms = self.attend(q, k, v, pos, stack, weighted, attn_mask, is_causal)  # (B, H, N, d)
        out = stack.transform_out(out, pos)
        out = stack.value_terms(out, v, pos, terms)
        out = self.norm(out.transpose(1, 2).reshape(B, N, C))
        return self.proj_drop(self.proj(out))

    def flex_call(self, q: torch.Tensor, stack: EncodingStack, weighted: bool, mixed: bool, masked: bool) -> bool:
        """Whether this call runs FlexAttention instead of SDPA (``vispe.flex.choose_kernel``)."""
        if self.attention_kernel == 'sdpa':
            return False
        dropout = self.attn_drop.p if self.training else 0.0
        why_not = why_not_flex(stack.with_hook('logit_bias'), weighted, masked, dropout, q)
        return choose_kernel(self.attention_kernel, q, why_not, mixed) == 'flex'

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: Positions,
        stack: EncodingStack,
        weighted: bool,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
        rows: slice = slice(None),
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Attention of the query rows ``rows`` over every key, and with ``weighted`` the stack's ``weighted_terms``."""
        if not weighted:
            dropout = self.attn_drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=is_causal)
            return out, []
        attn = self.attention_weights(q, k, attn_mask, is_causal)  # (B, H, n, N)
        return attn @ v, stack.weighted_terms(v, pos, attn, rows)

    def chunked(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: Positions,
        stack: EncodingStack,
        weighted: bool,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
        rows: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``attend`` ``rows`` queries at a time, each chunk with its bias rows only and recomputed in backward."""
        row_biases: list[Callable[[slice], torch.Tensor]] = stack.logit_bias_rows(q, k, pos)

        def chunk(start: int, q_rows: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
            span = slice(start, start + q_rows.shape[-2])
            mask = merged_mask(
                [bias(span) for bias in row_biases], attn_mask, is_causal, span.start, span.stop, q_rows, k
            )
            return self.attend(q_rows, k, v, pos, stack, weighted, mask, False, span)

        parts = []
        for start in range(0, q.shape[-2], rows):
            q_rows = q[:, :, start : start + rows]
            if torch.is_grad_enabled():
                parts.append(checkpoint(chunk, start, q_rows, use_reentrant=False))
            else:
                parts.append(chunk(start, q_rows))
        out = torch.cat([o for o, _ in parts], dim=-2)
        terms = [torch.cat([t[i] for _, t in parts], dim=-2) for i in range(len(parts[0][1]))]
        return out, terms


def may_chunk(num_tokens) -> bool:
    """Whether the byte budget may split attention into chunks: not while FX traces nor under torch.export."""
    if isinstance(num_tokens, torch.fx.Proxy):
        return False
    return not (isinstance(num_tokens, torch.SymInt) and torch.compiler.is_exporting())


def set_bias_budget(model: nn.Module, budget: float | None) -> int:
    """Set ``bias_budget`` (bytes; None: the default) on every vispe ``Attention`` in ``model``; returns how many."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    for layer in layers:
        layer.bias_budget = budget
    return len(layers)


def set_attention_kernel(model: nn.Module, kernel: str) -> int:
    """Set ``attention_kernel`` ('auto', 'sdpa', 'flex') on every vispe ``Attention`` in ``model``; returns how many."""
    check_kernel(kernel)
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    for layer in layers:
        layer.attention_kernel = kernel
    return len(layers)


def may_use_flex(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether some ``Attention`` of ``model`` may take FlexAttention on ``x``'s device ('flex', or 'auto' on CUDA)."""
    kernels = {m.attention_kernel for m in model.modules() if isinstance(m, Attention)}
    return 'flex' in kernels or ('auto' in kernels and x.is_cuda)


@torch.fx.wrap
def full_mask(
    biases: list[torch.Tensor], attn_mask: torch.Tensor | None, is_causal: bool, q: torch.Tensor, k: torch.Tensor
) -> torch.Tensor | None:
    """``merged_mask`` of every query row; an FX leaf, so a traced graph decides on ``attn_mask`` at run time."""
    return merged_mask(biases, attn_mask, is_causal, 0, q.shape[-2], q, k)


def merged_mask(
    biases: list[torch.Tensor],
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    start: int,
    stop: int,
    q: torch.Tensor,
    k: torch.Tensor,
) -> torch.Tensor | None:
    """One float attn_mask for the query rows ``start:stop``, or None when there is nothing to add: the sum of the bias
    rows, the caller's mask (a boolean one attends where True) and, with ``is_causal``, -inf above the diagonal.
    TorchScript-compatible, as ``full_mask`` runs in scripted graphs."""
    mask: torch.Tensor | None = None
    for bias in biases:
        bias = bias.to(q.dtype)
        mask = bias if mask is None else mask + bias
    if attn_mask is not None:
        given = attn_mask
        if attn_mask.dim() >= 2 and attn_mask.shape[-2] != 1:
            given = attn_mask[..., start:stop, :]
        if given.dtype == torch.bool:
            given = torch.zeros_like(given, dtype=q.dtype).masked_fill_(~given, float('-inf'))
        mask = given if mask is None else mask + given
    if is_causal:
        queries = torch.arange(start, stop, device=q.device)[:, None]
        above = queries < torch.arange(k.shape[-2], device=q.device)
        causal = torch.zeros(above.shape, dtype=q.dtype, device=q.device).masked_fill_(above, float('-inf'))
        mask = causal if mask is None else mask + causal
    return mask
