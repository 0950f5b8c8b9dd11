"""PEG, the conditional position encoding of CPVT (Chu et al., ICLR 2023)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vispe.encodings.base import Encoding
from vispe.layout import add_per_grid
from vispe.positions import Positions, is_symbolic
from vispe.registry import ENCODINGS


def require_grid(pos: Positions, name: str) -> tuple[int, int]:
    """The (h, w) token grid of ``pos``; a ValueError naming ``name`` when the tokens are not on a grid."""
    if pos.grid is None:
        raise ValueError(
            f'{name} needs tokens on a grid (Positions.grid = (h, w)): its conv runs over the token grid. For point '
            'clouds or sampled positions use a coordinate-based encoding instead (e.g. lff, ape_sincos).'
        )
    h, w = pos.grid
    if is_symbolic(h, w):  # a traced model: the sizes stay symbolic (int() would bake the example's grid in)
        return h, w
    if h * w != pos.num_tokens:
        raise ValueError(f'{name}: Positions.grid {pos.grid} does not hold the {pos.num_tokens} non-prefix tokens')
    return int(h), int(w)


def check_kernel_size(kernel_size: int, name: str) -> int:
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f'{name} needs an odd kernel_size >= 1 (so the output stays on the token grid), got {kernel_size!r}; '
            'use e.g. 3'
        )
    return kernel_size


def _check_blocks(blocks: int | Sequence[int], depth: int | None) -> tuple[int, ...]:
    items = (blocks,) if isinstance(blocks, int) else tuple(blocks)
    if not items or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in items):
        raise ValueError(
            f'peg blocks must be a non-negative int or a non-empty sequence of them (block indices), got {blocks!r}; '
            'use e.g. blocks=0 (after the first block, the paper default) or blocks=(0, 1, 2)'
        )
    if depth is not None and max(items) >= depth:
        raise ValueError(
            f'peg blocks {items} name a block past the last of this {depth}-block model; use 0..{depth - 1}'
        )
    return tuple(sorted(set(items)))


@ENCODINGS.register_module(name='peg')
class PEG(Encoding):
    """x + DWConv(x) on the (B, D, h, w) patch tokens after each block in ``blocks``; its zero padding tells a token
    where the border is. Prefix tokens pass unchanged.

    Args:
        dim: model width.
        kernel_size: odd conv size (3 in the paper).
        blocks: the block index or indices the PEG follows, one shared conv (the paper: after block 0).
        depth: the model's block count, to validate ``blocks`` (None: not checked).
    """

    def __init__(
        self, dim: int, kernel_size: int = 3, blocks: int | Sequence[int] = (0,), depth: int | None = None
    ) -> None:
        super().__init__()
        k = check_kernel_size(kernel_size, 'peg')
        self.blocks: tuple[int, ...] = _check_blocks(blocks, depth)
        self.proj = nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim)

    def after_block(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        if pos.layout is not None:  # a mixed batch: each image's conv on its own grid
            return add_per_grid(x, pos.layout, self.proj)
        h, w = require_grid(pos, 'peg')
        n = pos.num_prefix
        prefix, patches = x[:, :n], x[:, n:]
        # (B, N, D) -> (B, D, h, w) is a view (channels-last strides): no copy before the conv
        feat = patches.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)
        patches = patches + self.proj(feat).flatten(2).transpose(1, 2)
        return torch.cat([prefix, patches], dim=1) if n else patches


__all__ = ['PEG', 'check_kernel_size', 'require_grid']
