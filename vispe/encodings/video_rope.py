"""Rotary position encodings made for video token grids (t, h, w): M-RoPE in timm's ``RotaryEmbeddingMRope``
interleaved layout (Qwen3-VL) or Qwen2-VL's sections, VideoRoPE (Wei et al., ICML 2025) and VRoPE (Liu et al., EMNLP
2025).

All three give channel pair i (i < d/2, d the head dim) a position id p_i, a fixed linear map of the token's
(t, h, w) plus an offset from the grid, p_i = A[i] . ((t, h, w) + B[i]), and turn it by p_i w_i with
w_i = theta^(-2i/d), one ladder over all pairs (channel 0 the fastest); they differ in A and B alone
(``ChannelMapRoPE``). The references pair channel i with i + d/2 (rotate-half); vispe's pairs are interleaved
channels (2i, 2i+1), a fixed permutation of q's and k's channels that leaves every q . k as it is.

Positions: ``vispe.positions.video_positions``, time in units of the training clips' tubelets (a clip at half the
frame rate has time spacing 2). Prefix tokens pass unrotated; q . k between patch tokens depends only on their
(t, h, w) offset, so the grid offsets B (centring, mirroring) change nothing between patches: they matter to the
references next to text tokens, and are kept so that the position ids are the references'.

Resolution strategies act on each axis separately, frame count and spatial size (``RotaryStrategies.axis_scales``
on the grid's span, grid times time spacing, against the training grid): ``interpolate`` divides the coordinates by
s_a before the map; ``ntk`` and ``yarn`` rescale each channel's frequency by the scale of its axis
(``vispe.encodings.rotary_scaling``), its rank among that axis' channels (0 = fastest) and that axis' training
length. DyPE's schedules are not offered. A mixed-size batch is refused: video backbones batch clips of one size.

Hook: rotate, q and k (B, H, N_total, d) -> same. No parameters. Angles and the rotation run in float32 even under
autocast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from vispe.encodings.base import check_positive
from vispe.encodings.rotary import GridRoPE, train_grid_from
from vispe.kernels.rotary import rotary_table
from vispe.positions import Positions
from vispe.registry import ENCODINGS

#: what each channel reads as its frequency's axis, for ``ntk`` and ``yarn`` (coordinate order)
TIME, ROW, COL = 0, 1, 2
TIME_STRIDES = ('grid', 'train')
#: M-RoPE's layouts of the axes over the channel pairs (``MRoPE``)
MROPE_LAYOUTS = ('interleaved', 'sections')


class ChannelMapRoPE(GridRoPE):
    """The shared core: per-channel position ids p_i = sum_a A[i, a] (x_a + B[i, a]) / s_a for coordinates
    x = (t, h, w), with s_a the ``interpolate`` scales (1 otherwise), turned by w_i = theta^(-2i/d).

    A subclass gives A and B for a grid (``channel_map``) and, for ``ntk`` and ``yarn``, each channel's axis
    (``set_axes``). The (cos, sin) table is computed once per grid, prefix count, device and strategy and cached
    (``GridTableCache``), then q and k go through the fused rotary kernel (``vispe.kernels.rotary.rotate_qk``).

    Args:
        dim: the attention's width.
        num_heads: the attention's heads.
        ndim: position axes; only 3, (t, h, w), is accepted.
        theta: base of the frequency ladder, > 0.
        grid_size: the training grid (t, h, w), needed by every strategy but ``none``.
        min_pairs: the fewest channel pairs the subclass' layout needs.
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

    def rotation_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table (..., num_prefix + N, d/2, 2) at the scales of the grid's span."""
        self.check_positions(pos)
        assert pos.grid is not None
        scales = self.axis_scales(pos.coords, pos.grid_span)
        return rotary_table(self.angles(pos.coords, pos.grid, scales), pos.num_prefix)


def _fixed_map(axes: Sequence[int], weights: Sequence[Sequence[float]]) -> torch.Tensor:
    return torch.tensor([weights[a] for a in axes], dtype=torch.float32)


@ENCODINGS.register_module(name='mrope')
class MRoPE(ChannelMapRoPE):
    """Multimodal RoPE (Qwen2-VL, Wang et al. 2024) on video, in one of two layouts of the axes over the pairs.

    Channel pair i reads one axis, raw (no centring): p_i = t, h or w. With ``mrope_section`` = (s_t, s_h, s_w):

    - ``layout='interleaved'`` (the default): timm 1.0.31's ``RotaryEmbeddingMRope`` (Qwen3-VL's
      ``apply_interleaved_mrope``): pairs 1, 4, 7, ... below 3 s_h read h, pairs 2, 5, 8, ... below 3 s_w read w,
      the rest t (s_t is nominal, as in timm; the slices stop at d/2): d = 64 at (8, 12, 12) gives t / h / w
      11 / 11 / 10 pairs, time spread over every frequency, pair 0 included.
    - ``layout='sections'``: Qwen2-VL's own ``apply_multimodal_rotary_pos_emb``: the first s_t pairs read t, the
      next s_h h, the last s_w w (contiguous blocks, so time takes the fastest frequencies and w the slowest); the
      sections must sum to d/2 (Qwen2-VL: (16, 24, 24) at d = 128).

    timm and Qwen encode images with t = 0; here t is the tubelet index. Defaults: timm's, ``mrope_section``
    (8, 12, 12), ``theta`` 10000 (its ``temperature``; Qwen2-VL uses 1e6). Strategies: ``none``, ``interpolate``,
    and ``ntk`` and ``yarn`` with each pair's frequency following its axis. Cost: the (N, d/2) table once per grid
    (cached), then the fused rotary kernel as rope_axial.

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must be even and give each axis a pair (at least
            6).
        num_heads: the attention's heads.
        ndim: position axes; only 3, (t, h, w), is accepted.
        theta: base of the frequency ladder theta^(-2i/d), > 0.
        grid_size: the training grid (t, h, w) (supplied by the backbone), needed by every strategy but ``none``.
        mrope_section: (s_t, s_h, s_w): the strided extents of timm's interleave, or the pairs of each axis' block; s_h
            and s_w >= 1.
        layout: 'interleaved' or 'sections' (above).
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
    """VideoRoPE (Wei et al., "VideoRoPE: What Makes for Good Video Rotary Position Embedding?", ICML 2025;
    github Wiselnn570/VideoRoPE): low-frequency temporal allocation (LTA), diagonal layout (DL) and adjustable
    temporal spacing (ATS), on video-only tokens.

    LTA: the lowest ``time_pairs`` pairs read time, the others alternate h, w, h, w, ... from pair 0 (h gets
    the extra pair of an odd count). DL and ATS: t_id = delta t, h_id = delta t + h - (H-1)//2 and
    w_id = delta t + w - (W-1)//2 (the frame centre on the t/h/w diagonal; ``(H-1)//2`` as the authors' code).
    The centring cancels between patches; delta t inside h_id and w_id does not: consecutive frames sit delta
    apart along the diagonal.

    Defaults: ``delta`` 2.0 (the authors' code and evaluations); ``time_pairs`` d/8, a quarter of the pairs as
    Qwen2-VL's [16, 24, 24]; ``theta`` 10000. The authors reuse the LLM's theta (1e6 for Qwen2-VL); a ViT's
    clips span tens of positions, not thousands, and 10000 is timm's default: not measured.

    Strategies: ``none``, ``interpolate``, and ``ntk`` and ``yarn`` with h pairs following h's scale, w pairs w's,
    time pairs time's (the delta t inside h_id and w_id is left to the spatial scales).

    Cost: the (N, d/2) table once per grid (cached), then the fused rotary kernel as rope_axial. CPU: 0.99-1.00x
    ape_learned in ViT-S (8 frames of 112 px, batch 8) and 1.01-1.04x in the video configs' tiny model (8 frames of
    32 px; ``tools/benchmark.py --model video``, docs/results/video.md). GPU: not measured here (no device).

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must be even, at least 8 with the default
            ``time_pairs``.
        num_heads: the attention's heads.
        ndim: position axes; only 3, (t, h, w), is accepted.
        theta: base of the frequency ladder theta^(-2i/d), > 0.
        grid_size: the training grid (t, h, w) (supplied by the backbone), needed by every strategy but ``none``.
        delta: ATS, the temporal spacing delta, > 0.
        time_pairs: the lowest-frequency pairs given to time, leaving h and w a pair each at least; None: head dim // 8.
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
    """VRoPE (Liu et al., "VRoPE: Rotary Position Embedding for Video Large Language Models", EMNLP 2025;
    github johncaged/VRoPE ``generate_nd_positions``), on video-only tokens.

    Four spatial combinations, c0 = h + w, c1 = h + (W-1-w), c2 = (H-1-h) + w, c3 = (H-1-h) + (W-1-w) (the
    diagonals of the frame and their mirrors, so that no corner is nearer than another); pair i reads
    p_i = t (H + W - 1) + c_{i mod 4}, every combination on high and low frequencies. No time pairs (the
    released code sets ``half_time_dim = 0``): time is the frame stride H + W - 1 alone, each frame a block of
    H + W - 1 indices.

    The stride depends on the grid: a clip at another spatial size is another time spacing. ``time_stride``:
    'grid' (the authors') takes H + W - 1 of the clip; 'train' that of the training grid, so the time spacing
    stays the trained one at any spatial size (the frames' index blocks then overlap, or leave gaps). Under
    ``interpolate`` the stride is the mapped grid's, (H / s_h) + (W / s_w) - 1, which is the training grid's.

    Strategies: ``none`` and ``interpolate`` alone: every pair mixes h, w and (through the stride) time, so a
    per-axis frequency rescale (``ntk``, ``yarn``) has no axis to follow.

    Defaults: ``theta`` 10000 (the authors reuse the LLM's; 10000 is timm's default, not measured),
    ``time_stride`` 'grid' (the authors').

    Cost: the (N, d/2) table once per grid (cached), then the fused rotary kernel as rope_axial. CPU: 0.99-1.00x
    ape_learned in ViT-S (8 frames of 112 px, batch 8) and 1.01-1.04x in the video configs' tiny model (8 frames of
    32 px; ``tools/benchmark.py --model video``, docs/results/video.md). GPU: not measured here (no device).

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must be even and at least 8 (a pair for each
            combination).
        num_heads: the attention's heads.
        ndim: position axes; only 3, (t, h, w), is accepted.
        theta: base of the frequency ladder theta^(-2i/d), > 0.
        grid_size: the training grid (t, h, w) (supplied by the backbone), needed by ``interpolate`` and by
            ``time_stride='train'``.
        time_stride: 'grid' (H + W - 1 of the clip) or 'train' (of the training grid).
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
