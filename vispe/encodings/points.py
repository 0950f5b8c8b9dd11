"""Encodings for point clouds, on positions in the data's unit: ``point_mlp`` (Point-MAE's MLP of the group
centres, absolute) and ``rope3d`` (rotary, relative; ``freq_scale`` rad per unit, about 1 / the distance between
neighbouring group centres: 8 for unit-size objects with 64 groups).
"""

from __future__ import annotations

from typing import cast

import torch
from timm.layers import trunc_normal_
from torch import nn

from vispe.encodings.base import Encoding, check_positive
from vispe.encodings.rotary_core import VectorRoPE, random_rotation
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='point_mlp')
class PointMLP(Encoding):
    """MLP of the token positions, added to the non-prefix tokens before every block (recomputed at each hook).

    Args:
        dim: model width D.
        ndim: position dimensions (3 for points).
        hidden_dim: MLP width (128 in Point-MAE).
        depth: the backbone's blocks (supplied by it): the ``embed`` hook serves block 0, the ``after_block`` hook of
            block i block i + 1. None: block 0 only.
        prefix_pos: Point-MAE's classifier's ``cls_pos``: one learned (1, 1, D) vector added to the prefix tokens before
            every block after the first (before the first the backbone's learned cls token absorbs it). False: prefix
            tokens get nothing (Point-MAE's pretraining encoder has no cls token).
    """

    ndims = (3,)
    needs_grid = False  # reads coordinates alone: points, and video grids too

    prefix_pos: nn.Parameter | None

    def __init__(
        self, dim: int, ndim: int = 3, hidden_dim: int = 128, depth: int | None = None, prefix_pos: bool = False
    ) -> None:
        super().__init__()
        check_positive('point_mlp', hidden_dim=hidden_dim)
        self.mlp = nn.Sequential(nn.Linear(ndim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
        self.blocks = tuple(range(depth - 1)) if depth else ()
        self.prefix_pos = nn.Parameter(trunc_normal_(torch.zeros(1, 1, dim), std=0.02)) if prefix_pos else None

    def table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        """(N, D) or (B, N, D) embeddings of the positions."""
        return self.mlp(pos.coords.to(cast(nn.Linear, self.mlp[0]).weight.dtype)).to(dtype)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x + self.table(pos, x.dtype)

    def after_block(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        p = pos.num_prefix
        prefix = x[:, :p] if self.prefix_pos is None else x[:, :p] + self.prefix_pos.to(x.dtype)
        return torch.cat([prefix, x[:, p:] + self.table(pos, x.dtype)], dim=1)


@ENCODINGS.register_module(name='rope3d')
class RoPE3D(VectorRoPE):
    """Rotary embedding of ndim-D point positions: P_a = d // (2 ndim) pairs per axis with magnitudes
    freq_scale / theta^(k / P_a), the remaining pairs unrotated; axial (group a turns with coordinate a) or mixed
    (learned, each head's groups along a random rotation's columns). A centroid prefix keeps every logit relative.

    Args:
        dim: model width.
        num_heads: attention heads.
        ndim: position dimensions (the backbone passes 3).
        mode: 'axial' (fixed; theta 100) or 'mixed' (learned per layer, head and pair; theta 10).
        theta: frequency base (None: the mode's default).
        freq_scale: rad per data unit of the fastest pair.
        prefix: 'centroid' (the mean of the sample's positions) or 'none' (unrotated).
    """

    ndims = (3,)
    needs_grid = False  # reads coordinates alone: points, and video grids too
    modes = ('axial', 'mixed')
    no_weight_decay_params = ('freqs',)
    weight_decay_note = "as rope_mixed's (mixed mode)"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 3,
        mode: str = 'axial',
        theta: float | None = None,
        freq_scale: float = 8.0,
        prefix: str = 'centroid',
    ) -> None:
        if mode not in self.modes:
            raise ValueError(f'rope3d mode must be one of {list(self.modes)}, got {mode!r}')
        if prefix not in ('centroid', 'none'):
            raise ValueError(f"rope3d prefix must be 'centroid' or 'none', got {prefix!r}")
        head_dim = dim // num_heads
        if head_dim // (2 * ndim) < 1:
            raise ValueError(f'rope3d needs a head dim of at least {2 * ndim} for {ndim}D positions, got {head_dim}')
        if not freq_scale > 0:
            raise ValueError(f'rope3d needs freq_scale > 0 (rad per data unit), got {freq_scale}')
        check_positive('rope3d', theta=theta)
        theta = float(theta if theta is not None else (100.0 if mode == 'axial' else 10.0))
        freqs = point_frequencies(head_dim, num_heads, ndim, mode, theta, float(freq_scale))
        # axial: (ndim, 1, d/2) shared by the heads, fixed; mixed: (ndim, H, d/2) learned
        super().__init__(freqs if mode == 'mixed' else freqs[:, :1], prefix, learned=mode == 'mixed')
        self.mode, self.ndim, self.num_heads, self.head_dim = mode, ndim, num_heads, head_dim
        self.theta, self.freq_scale = theta, float(freq_scale)
        self.rotated_pairs = head_dim // (2 * ndim) * ndim

    def reset_parameters(self) -> None:
        if self.mode == 'mixed':
            with torch.no_grad():
                args = (self.head_dim, self.num_heads, self.ndim, self.mode, self.theta, self.freq_scale)
                self.freqs.copy_(point_frequencies(*args))

    def extra_repr(self) -> str:
        return (
            f'mode={self.mode}, theta={self.theta:g}, freq_scale={self.freq_scale:g}, pairs={self.rotated_pairs}, '
            f'prefix={self.prefix}'
        )


def point_frequencies(
    head_dim: int, num_heads: int, ndim: int, mode: str, theta: float, freq_scale: float
) -> torch.Tensor:
    """rope3d's initial (ndim, H, d/2) frequency vectors: pair k of group a (P_a = d // (2 ndim) pairs a group) along
    direction a (axial: the axes; mixed: the columns of a random rotation per head) with magnitude
    freq_scale / theta^(k / P_a); the pairs beyond ndim P_a stay 0 (unrotated)."""
    per_axis = head_dim // (2 * ndim)
    magnitudes = freq_scale / theta ** (torch.arange(per_axis, dtype=torch.float32) / per_axis)
    freqs = torch.zeros(ndim, num_heads, head_dim // 2)
    for h in range(num_heads):
        basis = random_rotation(ndim) if mode == 'mixed' else torch.eye(ndim)
        for a in range(ndim):
            freqs[:, h, a * per_axis : (a + 1) * per_axis] = basis[:, a, None] * magnitudes
    return freqs
