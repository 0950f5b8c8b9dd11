"""Locally-enhanced positional encoding (LePE) of CSWin (Dong et al., "CSWin Transformer: A General Vision
Transformer Backbone with Cross-Shaped Windows", CVPR 2022).

out = softmax(q k^T / sqrt(d)) v + DWConv(v): a depthwise conv over the values laid out on the token grid,
added to the attention output before the output projection. On a plain global-attention ViT the grid is the
whole token map. Hook: value_term, v (B, H, N_total, d) -> (B, H, N_total, d).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.conditional import check_kernel_size, require_grid
from vispe.layout import add_per_grid
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='lepe')
class LePE(Encoding):
    """LePE: a per-layer depthwise ``kernel_size`` conv (zero padding, bias) on V, one filter per channel of
    each head (H*d = D channels, head-major as in CSWin).

    The N = h*w patch values (B, H, N, d) are read as (B, H*d, h, w) and convolved; the prefix tokens (cls,
    registers) carry no position and get a zero term.

    Weight decay: nothing to declare: the conv weight is an ordinary depthwise conv weight, decayed as in CSWin's
    recipe; its bias, 1-D, takes none.

    Shapes: value_term v (B, H, num_prefix + h*w, d) -> (B, H, num_prefix + h*w, d).

    Attention path: its conv on V is added to the SDPA output, no mask: fused SDPA (flash or memory-efficient on CUDA).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE); the attention finds it by hook name over a
    ModuleDict (see VisionTransformerPE).
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
        """The conv term of v's token map; ``attn`` and ``rows`` are unused (it never asks for the weights)."""
        B, H, T, d = v.shape
        if pos.layout is not None:  # a mixed batch: each image's conv on its own grid, zero elsewhere
            flat = v.transpose(1, 2).reshape(B, T, H * d)
            term = add_per_grid(torch.zeros_like(flat), pos.layout, self.conv, source=flat)
            return term.reshape(B, T, H, d).transpose(1, 2)
        h, w = require_grid(pos, 'lepe')
        n = pos.num_prefix
        # (B, H, N, d) -> (B, H, d, N) -> (B, H*d, h, w): for the qkv-split v this is a view, no copy
        feat = v[:, :, n:].transpose(-1, -2).reshape(B, H * d, h, w)
        term = self.conv(feat).reshape(B, H, d, h * w).transpose(-1, -2)  # (B, H, N, d)
        # zero rows for the prefix: pad writes the one output tensor, where cat would also build a zeros tensor
        return F.pad(term, (0, 0, n, 0)) if n else term


__all__ = ['LePE']
