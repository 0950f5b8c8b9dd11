"""FlexAttention for encodings that add a term to the attention scores (iRPE, 2D ALiBi), computed inside the kernel
from small tables (``Encoding.score_term``): the (B, H, N, N) bias is never materialised. ``choose_kernel`` follows
``attention_kernel``: ``'sdpa'`` (the summed biases as SDPA's float mask), ``'flex'`` (else a ValueError saying why)
or ``'auto'`` (FlexAttention on CUDA from ``FLEX_MIN_TOKENS`` tokens and for mixed-size batches; SDPA otherwise).
FlexAttention serves a call only when every logit-bias encoding has a score term, none needs the softmax weights, the
caller passes no mask nor causal flag, and no attention dropout runs (``why_not_flex``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch import nn

#: the settings of ``Attention.attention_kernel``
ATTENTION_KERNELS = ('auto', 'sdpa', 'flex')
#: 'auto' takes FlexAttention on CUDA from this many tokens
FLEX_MIN_TOKENS = 1024

#: an encoding's score term: (b, h, q_idx, kv_idx) index tensors -> the term added to the score (FlexAttention's
#: score_mod arguments without the score)
ScoreTerm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def check_kernel(kernel: str) -> str:
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f'attention_kernel must be one of {list(ATTENTION_KERNELS)}, got {kernel!r}')
    return kernel


def why_not_flex(
    encodings: Sequence[nn.Module], weighted: bool, masked: bool, dropout: float, q: torch.Tensor
) -> str | None:
    """Why FlexAttention cannot serve this call (None: it can); ``encodings`` are the layer's logit-bias encodings."""
    if isinstance(q, torch.fx.Proxy):
        return 'an FX trace records the SDPA path'
    missing = [type(enc).__name__ for enc in encodings if not getattr(enc, 'has_score_term', False)]
    if missing:
        return f'{", ".join(missing)} has no score term for FlexAttention'
    if weighted:
        return 'an encoding needs the softmax weights (iRPE on V)'
    if masked:
        return "the call has the caller's own attn_mask or is causal"
    if dropout:
        return 'attention dropout is on (FlexAttention has none)'
    if not q.is_cuda and torch.is_grad_enabled() and q.requires_grad:
        return 'FlexAttention has no backward on CPU'
    return None


def choose_kernel(setting: str, q: torch.Tensor, why_not: str | None, mixed: bool = False) -> str:
    """'flex' or 'sdpa' for one call of a layer with logit-bias encodings, or of a mixed-size batch."""
    if setting == 'sdpa':
        return 'sdpa'
    if setting == 'flex':
        if why_not is not None:
            raise ValueError(f"attention_kernel 'flex' cannot run this call: {why_not}; use 'auto' or 'sdpa'")
        return 'flex'
    wins = mixed or q.shape[-2] >= FLEX_MIN_TOKENS
    return 'flex' if why_not is None and q.is_cuda and wins else 'sdpa'


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    """FlexAttention compiled once for eager callers, with dynamic shapes so varying lengths do not recompile."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def flex_attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, terms: Sequence[ScoreTerm], block_mask: Any = None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + sum of the terms) v for (B, H, N, d) q, k, v, masked by ``block_mask``."""
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, q_idx, kv_idx):
        for term in terms:
            score = score + term(b, h, q_idx, kv_idx)
        return score

    attend: Callable[..., torch.Tensor] = flex_attention
    if q.is_cuda and not torch.compiler.is_compiling():
        attend = _compiled_flex()
    out = attend(q, k, v, score_mod=score_mod if terms else None, block_mask=block_mask)
    assert isinstance(out, torch.Tensor)  # without return_lse FlexAttention returns the output alone
    return out


__all__ = [
    'ATTENTION_KERNELS',
    'FLEX_MIN_TOKENS',
    'ScoreTerm',
    'check_kernel',
    'choose_kernel',
    'flex_attend',
    'why_not_flex',
]
