"""Locally-enhanced positional encoding (LePE) of CSWin (Dong et al., "CSWin Transformer: A General Vision
Transformer Backbone with Cross-Shaped Windows", CVPR 2022).

out = softmax(q k^T / sqrt(d)) v + DWConv(v): a depthwise conv over the values laid out on the token grid,
added to the attention output before the output projection. On a plain global-attention ViT the grid is the
whole token map. Hook: value_term, v (B, H, N_total, d) -> (B, H, N_total, d).
"""

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
    """LePE: a per-layer depthwise ``kernel_size`` conv (zero padding, bias) on V, one filter per channel of
    each head (H*d = D channels, head-major as in CSWin).

    The N = h*w patch values (B, H, N, d) are read as (B, H*d, h, w) and convolved; the prefix tokens (cls,
    registers) carry no position and get a zero term.

    Weight decay: nothing to declare: the conv weight is an ordinary depthwise conv weight, decayed as in CSWin's
    recipe; its bias, 1-D, takes none.

    Shapes: value_term v (B, H, num_prefix + h*w, d) -> (B, H, num_prefix + h*w, d).

    Attention path: its conv on V is added to the SDPA output, no mask: fused SDPA (flash or memory-efficient on CUDA).
    The conv is one op on the tokens where they lie (``vispe.kernels.depthwise.depthwise_tokens``): on CUDA in eager
    mode a Triton kernel reads the value slice of the fused qkv output in place and writes the token-major term, which
    the attention adds to its output on the way to the projection (no channels-first copy, transpose or pad); on CPU
    and under torch.compile F.conv2d on a channels-last view. Cost: CPU 1.02x ape_learned (ViT-S/16 224, docs); GPU
    not measured yet since the kernel (the issue's target: <= 1.10x).
    ``self.conv`` holds the parameters; its weight and bias are passed to the op, so forward hooks on ``self.conv``
    itself are not called on a single-size batch.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE); the attention finds it by hook name over a
    ModuleDict (see VisionTransformerPE).

    Args:
        dim: model width D = H*d (the conv's channels).
        num_heads: heads H of the attention; must divide ``dim``.
        kernel_size: odd conv size >= 1.
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
        tokens = v.transpose(1, 2).reshape(B, T, H * d)  # (B, T, C): for timm's qkv-split v a view, no copy
        if pos.layout is not None:  # a mixed batch: each image's conv on its own grid, zero elsewhere
            term = add_per_grid(torch.zeros_like(tokens), pos.layout, self.conv, source=tokens)
        else:
            grid = require_grid(pos, 'lepe')
            term = depthwise_tokens(tokens, self.conv.weight, self.conv.bias, grid, pos.num_prefix)
        return term.reshape(B, T, H, d).transpose(1, 2)  # token-major (B, H, T, d), as the attention output wants


__all__ = ['LePE']
