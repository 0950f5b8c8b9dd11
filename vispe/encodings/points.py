"""Encodings for point clouds, on positions in the data's metric unit (ndim 3).

``point_mlp`` is Point-MAE's (Pang et al., ECCV 2022): the group centres through Linear(3, 128) - GELU -
Linear(128, D), added to the group tokens before every transformer block. It is absolute: translating the cloud
changes it, where the centred groups themselves do not.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from vispe.encodings.base import Encoding
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='point_mlp')
class PointMLP(Encoding):
    """MLP of the token positions, added to the non-prefix tokens before every block.

    Args:
        dim: model width D. ndim: position dimensions (3 for points). hidden_dim: MLP width (128 in Point-MAE).
        depth: the backbone's blocks; before block 0 is the ``embed`` hook, before block i + 1 the ``after_block``
            hook of block i (i < depth - 1). None: before block 0 only.

    The MLP is recomputed at each hook: on G group centres it costs G x (ndim x h + h x D) multiply-adds, small
    next to a block, and nothing derived from the positions is kept between calls.
    """

    ndims = (3,)

    def __init__(self, dim: int, ndim: int = 3, hidden_dim: int = 128, depth: Optional[int] = None) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(ndim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
        self.blocks = tuple(range(depth - 1)) if depth else ()

    def table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        """(N, D) or (B, N, D) embeddings of the positions."""
        return self.mlp(pos.coords.to(self.mlp[0].weight.dtype)).to(dtype)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x + self.table(pos, x.dtype)

    def after_block(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        p = pos.num_prefix
        return torch.cat([x[:, :p], x[:, p:] + self.table(pos, x.dtype)], dim=1)
