"""Rotary position embeddings for vision: axial and mixed (Heo et al., "Rotary Position Embedding for
Vision Transformer", ECCV 2024), with resolution strategies for grids larger or smaller than the training grid.

Channel layout follows timm's naver-ai RoPE-ViT models, so their weights load unchanged: pairs are
interleaved (channels 2j, 2j+1 form pair j) and, for images, the first half of the pairs rotates with the
column (x) and the second half with the row (y). The rotation is ``vispe.kernels.rotary``: a real (cos, sin) table,
the fused Triton kernel on CUDA (q and k in one pass), one complex multiplication per tensor in CPU eager mode, and
real-valued ops that Inductor fuses under ``torch.compile`` (no complex dtype in a compiled graph). Prefix tokens are
left unrotated ((1, 0) rows in the table, which avoids slicing q and k). Angles and the rotation are computed in
float32 even under autocast. Hook: rotate, q and k (B, H, N_total, d) -> same.

Cost: CPU, 1.01x ape_learned (ViT-S/16 224, batch 8, float32; docs). GPU: one read and write of q and k by the
kernel plus a (N, d/2) table per grid (cached); not yet measured on a GPU with the kernel (1.28x before it).

Resolution strategies (``strategy``): ``vispe.encodings.rotary_scaling``, which holds the rotary maths these encodings
share with dinov3, comrope, harope and gta.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from timm.layers.pos_embed_sincos import init_random_2d_freqs
from torch import nn

from vispe.encodings.base import check_positive
from vispe.encodings.rotary import (
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
    """Axial RoPE on image and video grids: pair k of axis a rotates by coord_a * w_k, w_k = 1/theta^(k/n_a) for
    the n_a pairs of axis a (theta = 100): 1/theta^(4k/d) on images, where each axis has d/4 pairs.

    Video (t, h, w): the d/2 pairs split into ``sections`` per axis, (t, h, w) order, each axis its own ladder from
    1 down towards 1/theta; by default as even as the head dim allows, time taking the fewest (a head dim of 64:
    10, 11 and 11 pairs). The channel order is the images' extended: the column's pairs first, then the row's,
    then time's, so a 2D model is unchanged. A clip at another frame rate carries its time spacing in its
    positions (``Positions.spacing``), and the strategies compare the grid's span (grid times spacing) with the
    training grid, per axis: frame count and spatial size scale separately.

    No parameters; the (cos, sin) tables are cached per grid, prefix count, device and strategy.

    Weight decay: nothing to declare, it has no parameters.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), ``train_grid`` is a tuple of any length (no
    TorchScript type), its tables come from a ``GridTableCache`` (a Python dict with tuple keys, filled by a lambda),
    and the strategies compute Python floats.

    Cost (video): the same kernel and one cached table per grid as on images. CPU: 0.99x ape_learned in ViT-S (8
    frames of 112 px, 196 tokens, batch 8, float32) and 1.03-1.06x in the video configs' tiny model (8 frames of 32
    px; ``tools/benchmark.py --model video``, docs/results/video.md). GPU: not measured.

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must be even, with at least one pair per axis
            (images: divisible by 4 without ``sections``, as before).
        num_heads: the attention's heads.
        ndim: position axes (the backbone supplies it; 2 for images, 3 for video).
        theta: base of the frequency ladders, > 0.
        grid_size: the training grid, ndim ints (supplied by the backbone), needed by every strategy but ``none``.
        sections: channel pairs per axis in coordinate order ((t, h, w) for video), adding up to d/2; None: as even as
            the head dim allows (``rotary_sections``).
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
    """Mixed RoPE with learnable frequencies, one set per attention layer and head, on image and video grids.

    The angle of pair j in head h is f_x[h, j] * col + f_y[h, j] * row. Init: magnitudes
    1/theta^(4k/d); a random angle a per head; the first d/4 pairs point along (cos a, sin a), the last d/4
    along a + pi/2.

    Video (t, h, w): a third component f_t multiplies time (angle f_x col + f_y row + f_t t). The init generalises
    the 2D one as rope3d's mixed mode does: per head a random 3D rotation U, the pairs in three groups of
    ``sections`` sizes (rope_axial's split), group g along U's column g with magnitudes 1/theta^(k/n_g), so each
    pair starts turning with a random mixture of time, rows and columns.

    Weight decay: none on ``freqs`` (ndim, H, d/2), as in the RoPE-ViT reference code (its ``no_weight_decay``
    names ``freqs``): decay would pull every frequency toward 0, i.e. toward no rotation and no position.

    Strategies act on each axis' component of the frequencies (f_x with the column scale, f_y with the row
    scale, f_t with the frame-count scale). Learned frequencies have no theta, so ``ntk`` applies its equivalent
    per-pair factor s^(-2k / (d_a - 2)), k the rank of |f_j| within its block of d/4 pairs (the blocks are the
    groups of the init, ``sections`` in 3D, d_a twice the block's pairs; rank 0 = largest magnitude, kept);
    ``yarn`` counts the rotations of pair j with |f_j|.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    Cost: the (H, N, d/2) angles once per forward pass and layer (learned, so never cached), shared by the batch;
    then the fused rotary kernel, whose backward also sums the table's gradient. CPU: 1.02x ape_learned (ViT-S/16
    224, batch 8, float32; docs); on video 1.00x in ViT-S (8 frames of 112 px, 196 tokens, batch 8) and 1.05-1.07x
    in the video configs' tiny model (width 128: the table and its gradient pass over q and k weigh more against
    its matmuls). GPU: not yet measured with the kernel (1.59x before it, and Inductor failed on its complex
    rotation, which compiled graphs no longer contain).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), ``train_grid`` is a tuple of any length (no
    TorchScript type), and the strategies compute Python float scales with generator expressions.

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must divide by 4 (images) or be even with a pair
            per axis (video).
        num_heads: the attention's heads (each learns its own frequencies).
        ndim: position axes: 2 for images, 3 for video (the backbone supplies it).
        theta: base of the initial frequency magnitudes, > 0.
        grid_size: the training grid (supplied by the backbone), needed by every strategy but ``none``.
        sections: video: the pairs of the init's three groups (``rotary_sections``; None: as even as the head dim
            allows). Images always take two groups of d/4.
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    no_weight_decay_params = ('freqs',)
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
