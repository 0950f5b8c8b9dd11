"""Rotary encodings made for video token grids (t, h, w): M-RoPE (timm's interleaved layout or Qwen2-VL's
sections), VideoRoPE (Wei et al., ICML 2025) and VRoPE (Liu et al., EMNLP 2025). Each gives channel pair i a position
id p_i = A[i] . ((t, h, w) + B[i]) and turns it by p_i w_i, w_i = theta^(-2i/d) (``ChannelMapRoPE``); they differ in A
and B. vispe's pairs are interleaved channels where the references rotate halves: a fixed permutation that leaves
every q . k as it is. The strategies act per axis; no DyPE; one clip size per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from vispe.encodings.base import check_positive
from vispe.encodings.rotary_core import GridRoPE, train_grid_from
from vispe.kernels.rotary import cos_sin_table
from vispe.positions import Positions
from vispe.registry import ENCODINGS

#: what each channel reads as its frequency's axis, for ``ntk`` and ``yarn`` (coordinate order)
TIME, ROW, COL = 0, 1, 2
TIME_STRIDES = ('grid', 'train')
#: M-RoPE's layouts of the axes over the channel pairs (``MRoPE``)
MROPE_LAYOUTS = ('interleaved', 'sections')


class ChannelMapRoPE(GridRoPE):
    """The shared core: p_i = sum_a A[i, a] (x_a + B[i, a]) / s_a (s_a: ``interpolate``'s scales), turned by
    w_i = theta^(-2i/d); a subclass gives A and B (``channel_map``) and each channel's axis (``set_axes``), and passes
    ``min_pairs``, the fewest channel pairs its layout needs.
    """

    ndims: ClassVar[tuple[int, ...]] = (3,)
    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate', 'ntk', 'yarn')
    opt_in_strategies: ClassVar[tuple[str, ...]] = ()
    inv_freq: torch.Tensor  # buffer (d/2,): theta^(-2i/d)
    axis: torch.Tensor  # buffer (d/2,) long: the axis whose scale each channel's frequency follows (-1: none)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int,
        theta: float,
        grid_size: Sequence[int] | None,
        min_pairs: int,
    ) -> None:
        super().__init__()
        name = self.registry_name()
        if ndim != 3:
            raise ValueError(f'{name} encodes video token grids (t, h, w), so it needs ndim=3, got ndim={ndim}')
        check_positive(name, theta=theta)
        self.head_dim = dim // num_heads
        if self.head_dim % 2 or self.head_dim < 2 * min_pairs:
            raise ValueError(
                f'{name} needs an even head dim (embed_dim / num_heads) of at least {2 * min_pairs}, got '
                f'{self.head_dim}; change embed_dim or num_heads'
            )
        self.pairs = self.head_dim // 2
        self.theta = theta
        self.train_grid = train_grid_from(grid_size, 3)
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        self.register_buffer('inv_freq', 1.0 / theta**exponent, persistent=False)  # timm's freq_bands
        self.set_axes([-1] * self.pairs)

    def set_axes(self, axes: Sequence[int]) -> None:
        """Each channel's axis (``TIME``, ``ROW``, ``COL``, -1 for none), and the pairs of each axis."""
        axis = torch.tensor(list(axes), dtype=torch.long)
        self.register_buffer('axis', axis, persistent=False)
        self.axis_pairs = tuple(int((axis == a).sum()) for a in (TIME, ROW, COL))

    def channel_map(self, grid: Sequence[int], scales: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B, (d/2, 3) float32 each, for the token grid (t, h, w) at the ``interpolate`` scales."""
        raise NotImplementedError

    def frequencies(self, scales: Sequence[float]) -> torch.Tensor:
        """The (d/2,) float32 frequencies under ``ntk`` or ``yarn`` at the per-axis scales (t, h, w); the trained
        ones under ``none`` and ``interpolate``."""
        freqs = self.inv_freq
        if self.strategy not in ('ntk', 'yarn'):
            return freqs
        factors = torch.ones_like(freqs, dtype=torch.float32)
        for a, s in enumerate(scales):
            own = self.axis == a
            if s != 1.0:
                assert self.train_grid is not None  # a scale other than 1 needs one (axis_scales)
                factors[own] = self.strategy_factors(freqs[own], s, self.train_grid[a], (self.axis_pairs[a],))
        return freqs * factors

    def channel_positions(
        self, coords: torch.Tensor, grid: Sequence[int], scales: Sequence[float] | None = None
    ) -> torch.Tensor:
        """(..., N, 3) (t, h, w) coordinates of the token grid ``grid`` -> (..., N, d/2) float32 position ids p_i,
        at ``scales`` (None: those of ``grid``; pass the span's for a clip with time spacing)."""
        scales = self.axis_scales(coords, grid) if scales is None else scales
        interp = tuple(scales) if self.strategy == 'interpolate' else (1.0, 1.0, 1.0)
        weights, shifts = self.channel_map(grid, interp)
        weights = weights / torch.tensor(interp, dtype=torch.float32, device=weights.device)
        shifted = coords.float()[..., None, :] + shifts.to(coords.device)  # (..., N, d/2, 3)
        return (shifted * weights.to(coords.device)).sum(-1)  # no matmul: autocast cannot downcast it

    def scaled_angles(
        self, coords: torch.Tensor, scales: Sequence[float], kappa: torch.Tensor | None, grid: Sequence[int] | None
    ) -> torch.Tensor:
        """(..., N, 3) -> (..., N, d/2) angles p_i w_i on the token grid ``grid`` (required: the offsets and VRoPE's
        stride read it). ``kappa``: unused, no DyPE."""
        if grid is None:
            raise ValueError(f'{self.registry_name()} reads the token grid (t, h, w) for its offsets; pass grid')
        return self.channel_positions(coords, grid, scales) * self.frequencies(scales).to(coords.device)

    def check_positions(self, pos: Positions) -> None:
        """ValueError unless ``pos`` is one clip size's video positions (a (t, h, w) grid, no mixed layout)."""
        name = self.registry_name()
        if pos.layout is not None:
            raise ValueError(f'{name} takes one clip size per batch for now (video backbones batch clips of one size)')
        if pos.grid is None or len(pos.grid) != 3:
            raise ValueError(f'{name} needs video positions with a (t, h, w) grid (video_positions), got {pos.grid}')

    def build_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table (..., num_prefix + N, d/2, 2) at the scales of the grid's span."""
        self.check_positions(pos)
        assert pos.grid is not None
        scales = self.axis_scales(pos.coords, pos.grid_span)
        return cos_sin_table(self.angles(pos.coords, pos.grid, scales), pos.num_prefix)


def _fixed_map(axes: Sequence[int], weights: Sequence[Sequence[float]]) -> torch.Tensor:
    return torch.tensor([weights[a] for a in axes], dtype=torch.float32)


@ENCODINGS.register_module(name='mrope')
class MRoPE(ChannelMapRoPE):
    """Multimodal RoPE (Qwen2-VL, Wang et al. 2024): pair i reads one axis, raw: p_i = t, h or w.

    ``layout='interleaved'``: timm's ``RotaryEmbeddingMRope`` (Qwen3-VL): pairs 1, 4, 7, ... below 3 s_h read h, pairs
    2, 5, 8, ... below 3 s_w read w, the rest t. ``layout='sections'``: Qwen2-VL's blocks of s_t, s_h, s_w pairs.

    Args:
        dim: the attention's width; the head dim must give h and w a pair each.
        num_heads: the attention's heads.
        ndim: position axes; only 3.
        theta: base of the ladder, > 0 (timm's 10000; Qwen2-VL: 1e6).
        grid_size: the training grid (t, h, w), needed by every strategy but ``none``.
        mrope_section: (s_t, s_h, s_w); with ``'sections'`` summing to d/2.
        layout: 'interleaved' or 'sections'.
    """

    weights: torch.Tensor  # buffer (d/2, 3): A, each pair's weights of (t, h, w)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 3,
        theta: float = 10000.0,
        grid_size: Sequence[int] | None = None,
        mrope_section: Sequence[int] = (8, 12, 12),
        layout: str = 'interleaved',
    ) -> None:
        super().__init__(dim, num_heads, ndim, theta, grid_size, min_pairs=1)
        section = tuple(int(s) for s in mrope_section)
        if len(section) != 3 or min(section) < 0:
            raise ValueError(f'mrope_section must be 3 ints >= 0 (t, h, w), got {tuple(mrope_section)}')
        if layout not in MROPE_LAYOUTS:
            raise ValueError(f'mrope layout must be one of {MROPE_LAYOUTS}, got {layout!r}')
        if layout == 'sections' and sum(section) != self.pairs:
            raise ValueError(
                f"mrope layout='sections' needs mrope_section to sum to the head dim's {self.pairs} pairs, got "
                f'{section} (Qwen2-VL: (16, 24, 24) at head dim 128)'
            )
        axis = torch.full((self.pairs,), TIME)
        if layout == 'interleaved':
            axis[1 : 3 * section[1] : 3] = ROW  # timm's slices: the stop clamps at d/2, time takes the rest
            axis[2 : 3 * section[2] : 3] = COL
        else:
            axis[section[0] : section[0] + section[1]] = ROW
            axis[section[0] + section[1] :] = COL
        axes = axis.tolist()
        if ROW not in axes or COL not in axes:
            raise ValueError(
                f'mrope gives no channel pair to h or w with head dim {self.head_dim} and mrope_section={section}; '
                'use a head dim >= 6 and s_h, s_w >= 1'
            )
        self.mrope_section, self.layout = section, layout
        self.set_axes(axes)
        self.register_buffer('weights', _fixed_map(axes, torch.eye(3).tolist()), persistent=False)

    def channel_map(self, grid: Sequence[int], scales: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weights, torch.zeros_like(self.weights)


@ENCODINGS.register_module(name='videorope')
class VideoRoPE(ChannelMapRoPE):
    """VideoRoPE (Wei et al., ICML 2025; Wiselnn570/VideoRoPE): the lowest ``time_pairs`` pairs read time, the others
    alternate h, w; t_id = delta t, h_id = delta t + h - (H-1)//2, w_id = delta t + w - (W-1)//2.

    Args:
        dim: the attention's width; the head dim must be even, at least 8 with the default ``time_pairs``.
        num_heads: the attention's heads.
        ndim: position axes; only 3.
        theta: base of the ladder, > 0 (timm's 10000; the authors reuse the LLM's 1e6).
        grid_size: the training grid (t, h, w), needed by every strategy but ``none``.
        delta: the temporal spacing, > 0.
        time_pairs: the pairs given to time, leaving h and w a pair each; None: head dim // 8.
    """

    weights: torch.Tensor  # buffer (d/2, 3): A, each pair's weights of (t, h, w)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 3,
        theta: float = 10000.0,
        grid_size: Sequence[int] | None = None,
        delta: float = 2.0,
        time_pairs: int | None = None,
    ) -> None:
        super().__init__(dim, num_heads, ndim, theta, grid_size, min_pairs=1)
        check_positive('videorope', delta=delta)
        pairs = self.pairs
        n_t = pairs // 4 if time_pairs is None else int(time_pairs)
        if not 1 <= n_t <= pairs - 2:
            raise ValueError(
                f'videorope needs time_pairs between 1 and {pairs - 2} (a pair each left for h and w) with head dim '
                f'{self.head_dim}, got {n_t}; use a head dim >= 8 or set time_pairs'
            )
        self.delta = float(delta)
        self.time_pairs = n_t
        axes = [(ROW, COL)[i % 2] for i in range(pairs - n_t)] + [TIME] * n_t
        self.set_axes(axes)
        rows = [[self.delta, 0.0, 0.0], [self.delta, 1.0, 0.0], [self.delta, 0.0, 1.0]]  # t, h, w channels
        self.register_buffer('weights', _fixed_map(axes, rows), persistent=False)

    def channel_map(self, grid: Sequence[int], scales: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
        centre = torch.tensor([0.0, -((grid[1] - 1) // 2), -((grid[2] - 1) // 2)])
        return self.weights, centre.expand_as(self.weights)


@ENCODINGS.register_module(name='vrope')
class VRoPE(ChannelMapRoPE):
    """VRoPE (Liu et al., EMNLP 2025; johncaged/VRoPE): pair i reads p_i = t (H + W - 1) + c_{i mod 4}, with c0 = h + w,
    c1 = h + (W-1-w), c2 = (H-1-h) + w, c3 = (H-1-h) + (W-1-w). Only ``none`` and ``interpolate``: every pair mixes the
    axes.

    Args:
        dim: the attention's width; the head dim must be even and at least 8.
        num_heads: the attention's heads.
        ndim: position axes; only 3.
        theta: base of the ladder, > 0.
        grid_size: the training grid (t, h, w), needed by ``interpolate`` and ``time_stride='train'``.
        time_stride: 'grid' (the clip's H + W - 1, the authors') or 'train' (the training grid's).
    """

    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate')
    mirror: torch.Tensor  # buffer (d/2, 2): 1 where the pair's combination mirrors h (H-1-h), w (W-1-w)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 3,
        theta: float = 10000.0,
        grid_size: Sequence[int] | None = None,
        time_stride: str = 'grid',
    ) -> None:
        super().__init__(dim, num_heads, ndim, theta, grid_size, min_pairs=4)
        if time_stride not in TIME_STRIDES:
            raise ValueError(f'vrope: time_stride must be one of {list(TIME_STRIDES)}, got {time_stride!r}')
        if time_stride == 'train' and self.train_grid is None:
            raise ValueError(
                "vrope: time_stride='train' takes the training grid's H + W - 1; pass grid_size=(t, h, w) or use 'grid'"
            )
        self.time_stride = time_stride
        combo = torch.arange(self.pairs) % 4  # index 2 * (h mirrored) + (w mirrored), as the authors' stacking
        self.register_buffer('mirror', torch.stack([combo // 2, combo % 2], -1).float(), persistent=False)

    def channel_map(self, grid: Sequence[int], scales: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.time_stride == 'train':
            assert self.train_grid is not None
            stride = float(self.train_grid[1] + self.train_grid[2] - 1)
        else:
            stride = grid[1] / scales[1] + grid[2] / scales[2] - 1  # the grid the positions are mapped onto
        signs = 1.0 - 2.0 * self.mirror  # (d/2, 2): +1 or -1 per h, w
        weights = torch.cat([torch.full_like(signs[:, :1], stride), signs], dim=-1)
        last = torch.tensor([grid[1] - 1.0, grid[2] - 1.0], device=signs.device)  # a mirrored axis reads H-1-h
        shifts = torch.cat([torch.zeros_like(signs[:, :1]), -self.mirror * last], dim=-1)
        return weights, shifts


__all__ = ['ChannelMapRoPE', 'MRoPE', 'VRoPE', 'VideoRoPE']
