"""Rotary position embeddings for vision, axial and mixed (Heo et al., ECCV 2024), on image and video grids, in
timm's RoPE-ViT channel layout (interleaved pairs; on images the column's pairs first), so its weights load unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from timm.layers.pos_embed_sincos import init_random_2d_freqs
from torch import nn

from vispe.encodings.base import check_positive
from vispe.encodings.rotary_core import (
    GridRoPE,
    axial_frequencies,
    frequency_ladder,
    random_rotation,
    rotary_sections,
    train_grid_from,
)
from vispe.encodings.rotary_scaling import ntk_theta
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='rope_axial')
class RoPEAxial(GridRoPE):
    """Axial RoPE: pair k of axis a turns by coord_a / theta^(k/n_a) over the n_a pairs of axis a; on images d/4 pairs
    per axis. On video the pairs split into ``sections`` per axis, after the column's and the row's. No parameters.

    Args:
        dim: the attention's width; the head dim must be even with a pair per axis (images: divisible by 4).
        num_heads: the attention's heads.
        ndim: position axes (2 for images, 3 for video).
        theta: base of the frequency ladders, > 0.
        grid_size: the training grid, needed by every strategy but ``none``.
        sections: channel pairs per axis in coordinate order, adding up to d/2; None: as even as possible.
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    freqs: torch.Tensor  # buffer (d/2,): the axes' ladders one after the other, in coordinate order

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        theta: float = 100.0,
        grid_size: Sequence[int] | None = None,
        sections: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        check_positive(self.registry_name(), theta=theta)
        self.head_dim = dim // num_heads
        self.ndim = ndim
        self.theta = theta
        self.train_grid = train_grid_from(grid_size, ndim)
        if ndim == 2 and sections is None:
            axial_frequencies(self.head_dim, ndim, theta)  # images: d/4 pairs an axis, as timm's RoPE-ViT weights
        self.sections = rotary_sections(self.head_dim, ndim, sections)
        ladders = [frequency_ladder(n, theta) for n in self.sections]
        self.register_buffer('freqs', torch.cat(ladders), persistent=False)

    @property
    def axis_dims(self) -> tuple[int, ...]:
        """d_a per position axis (coordinate order): its rotary channels, twice its pairs."""
        return tuple(2 * n for n in self.sections)

    def ladder(self, axis: int) -> torch.Tensor:
        """The trained (n_a,) frequencies of position axis ``axis`` (coordinate order)."""
        return self.freqs.split(self.sections)[axis]

    def axis_frequencies(self, scales: Sequence[float], kappa: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per axis (coordinate order), the (n_a,) float32 frequencies under the strategy at those scales; under
        DyPE at ``kappa`` ((B, 1, n_a) for a time per sample)."""
        return [self._scaled(s, a, kappa) for a, s in enumerate(scales)]

    def _scaled(self, scale: float, axis: int, kappa: torch.Tensor | None = None) -> torch.Tensor:
        freqs = self.ladder(axis)
        if scale == 1.0:
            return freqs
        if self.strategy == 'interpolate':
            return freqs / scale
        if self.strategy == 'ntk':  # a ladder's NTK is its theta's: the closed form
            theta = ntk_theta(self.theta, scale, self.axis_dims[axis])
            return frequency_ladder(self.sections[axis], theta).to(freqs.device)
        assert self.train_grid is not None  # a scale other than 1 needs one (axis_scales)
        n = (self.sections[axis],)
        return freqs * self.strategy_factors(freqs, scale, self.train_grid[axis], n, kappa)

    def scaled_angles(
        self, coords: torch.Tensor, scales: Sequence[float], kappa: torch.Tensor | None, grid: Sequence[int] | None
    ) -> torch.Tensor:
        """(..., N, ndim) -> (..., N, d/2): the last axis' pairs first (x before y for (row, col))."""
        freqs = self.axis_frequencies(scales, kappa)
        # the buffers follow the module; a table asked for on another device (positions there) gets them moved
        per_axis = [coords[..., a, None].float() * freqs[a].to(coords.device) for a in reversed(range(self.ndim))]
        return torch.cat(per_axis, dim=-1)


@ENCODINGS.register_module(name='rope_mixed')
class RoPEMixed(GridRoPE):
    """Mixed RoPE: learned frequencies per layer and head; pair j of head h turns by f_x[h, j] col + f_y[h, j] row
    (+ f_t[h, j] t on video).

    Init: timm's (so timm's RoPE-ViT weights and seeds give the same model); on video per head a random 3D rotation with
    pair group g along its column g. The strategies scale each axis' component; ``ntk`` ranks |f_j| within its group.

    Args:
        dim: the attention's width; the head dim must divide by 4 (images) or be even with a pair per axis (video).
        num_heads: the attention's heads.
        ndim: position axes: 2 for images, 3 for video.
        theta: base of the initial frequency magnitudes, > 0.
        grid_size: the training grid, needed by every strategy but ``none``.
        sections: video: the pairs of the init's three groups; None: as even as possible.
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    no_weight_decay_params = ('freqs',)
    weight_decay_note = 'as the RoPE-ViT reference; decay pulls frequencies toward no rotation'
    fixed_frequencies = False
    shared_heads = False

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        theta: float = 10.0,
        grid_size: Sequence[int] | None = None,
        sections: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        if ndim not in self.ndims:
            raise ValueError(f'rope_mixed takes 2D (image) or 3D (video) grid positions, got ndim={ndim}')
        check_positive('rope_mixed', theta=theta)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.ndim = ndim
        self.theta = theta
        self.train_grid = train_grid_from(grid_size, ndim)
        if ndim == 2:
            axial_frequencies(self.head_dim, ndim, theta)  # validates the head dim
            if sections is not None:
                raise ValueError('rope_mixed: sections are for video (ndim=3); images take two groups of d/4 pairs')
        self.sections = rotary_sections(self.head_dim, ndim, sections)
        self.freqs = nn.Parameter(torch.empty(ndim, num_heads, self.head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.ndim == 2:  # timm's init, so that timm's RoPE-ViT weights and seeds give the same model
                self.freqs.copy_(init_random_2d_freqs(self.head_dim, 1, self.num_heads, temperature=self.theta)[:, 0])
                return
            ladders = [frequency_ladder(n, self.theta) for n in self.sections]
            for h in range(self.num_heads):
                basis = random_rotation(self.ndim)  # its column g: the direction of group g
                self.freqs[:, h] = torch.cat([basis[:, g, None] * ladder for g, ladder in enumerate(ladders)], dim=1)

    def frequency_factors(self, scales: Sequence[float], kappa: torch.Tensor | None = None) -> torch.Tensor | None:
        """(ndim, H, d/2) float32 multipliers of (f_x, f_y[, f_t]) under the strategy at coordinate-order scales
        ((row, col), or (t, row, col)); (B, ndim, H, d/2) under DyPE with a time per sample, ``kappa`` (B, 1, 1);
        None: all 1."""
        if all(s == 1.0 for s in scales):
            return None
        by_freq_axis = tuple(reversed(scales))  # freqs[0] multiplies the column, freqs[1] the row, freqs[2] time
        magnitudes = self.freqs.detach().float().norm(dim=0)  # (H, d/2); the strategy is no function to train
        factors = []
        for a, s in enumerate(by_freq_axis):
            train = self.train_grid[self.ndim - 1 - a] if self.train_grid is not None else 1
            factors.append(self.strategy_factors(magnitudes, s, train, self.sections, kappa))
        return torch.stack(torch.broadcast_tensors(*factors), dim=-3)

    def scaled_angles(
        self, coords: torch.Tensor, scales: Sequence[float], kappa: torch.Tensor | None, grid: Sequence[int] | None
    ) -> torch.Tensor:
        """(..., N, ndim) (row, col) or (t, row, col) -> (..., H, N, d/2); float32 and matmul-free so autocast cannot
        downcast it."""
        freqs = self.freqs.float()
        factors = self.frequency_factors(scales, kappa)
        if factors is not None:
            freqs = freqs * factors  # (ndim, H, d/2), or (B, ndim, H, d/2) with a time per sample
        col, row = coords[..., -1].float(), coords[..., -2].float()
        angles = (
            col[..., None, :, None] * freqs[..., 0, :, None, :] + row[..., None, :, None] * freqs[..., 1, :, None, :]
        )
        if self.ndim == 3:
            angles = angles + coords[..., 0].float()[..., None, :, None] * freqs[..., 2, :, None, :]
        return angles


__all__ = ['RoPEAxial', 'RoPEMixed']
