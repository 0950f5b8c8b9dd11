"""LePE, CSWin's locally-enhanced positional encoding (Dong et al., CVPR 2022): softmax(q k^T / sqrt d) v + DWConv(v)
with the depthwise conv over the values on the token grid."""

from __future__ import annotations

import torch
from torch import nn

from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.conditional import check_kernel_size, require_grid
from vispe.kernels.depthwise import depthwise_tokens
from vispe.layout import add_per_grid
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='lepe')
class LePE(Encoding):
    """A per-layer depthwise ``kernel_size`` conv (zero padding, bias) on V, channels head-major as in CSWin; prefix
    tokens get a zero term. ``self.conv``'s weights go to ``depthwise_tokens``, so its forward hooks are not called.

    Args:
        dim: model width.
        num_heads: attention heads.
        kernel_size: odd conv size.
    """

    def __init__(self, dim: int, num_heads: int, kernel_size: int = 3) -> None:
        super().__init__()
        check_heads(dim, num_heads, 'lepe')
        k = check_kernel_size(kernel_size, 'lepe')
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.conv = nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim)

    def value_term(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor | None = None, rows: slice = slice(None)
    ) -> torch.Tensor:
        """The conv term of v's token map, (B, H, N_total, d); ``attn`` and ``rows`` are unused."""
        B, H, T, d = v.shape
        tokens = v.transpose(1, 2).reshape(B, T, H * d)  # (B, T, C): for timm's qkv-split v a view, no copy
        if pos.layout is not None:  # a mixed batch: each image's conv on its own grid, zero elsewhere
            term = add_per_grid(torch.zeros_like(tokens), pos.layout, self.conv, source=tokens)
        else:
            grid = require_grid(pos, 'lepe')
            term = depthwise_tokens(tokens, self.conv.weight, self.conv.bias, grid, pos.num_prefix)
        return term.reshape(B, T, H, d).transpose(1, 2)  # token-major (B, H, T, d), as the attention output wants


__all__ = ['LePE']
