"""The rotary core. Every rotary encoding turns channel pairs (2j, 2j+1) of q and k by angles that are sums of
coordinate x frequency, through one real (cos, sin) table and the rotation of ``vispe.kernels.rotary``; prefix tokens
take (1, 0) rows and pass unrotated (or sit at their sample's centroid).

- Frequencies: ``frequency_ladder`` (one axis' fixed ladder), ``axial_frequencies``, ``rotary_sections`` (pairs per
  axis), ``random_rotation`` (the mixed inits).
- ``VectorRoPE``: frequency vectors F (ndim, H or 1, d/2), angle_j = sum_a x_a F[a, h, j], on any coordinates
  (rope3d, STRING).
- ``GridRoPE``: rotary encodings on token grids that know their training grid (rope_axial, rope_mixed, the video
  RoPEs): the resolution strategies, each written once over frequencies and their ranks (``strategy_factors``; the
  maths in ``vispe.encodings.rotary_scaling``), the table per grid (cached when the frequencies are fixed), mixed-size
  batches rotated by rows, and YaRN's logit scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache
from vispe.encodings.rotary_scaling import (
    DYPE_STRATEGIES,
    DYPE_TIME_EXPONENT,
    dype_yarn_factors,
    frequency_ranks,
    ntk_factors,
    yarn_factors,
    yarn_mscale,
)
from vispe.kernels.rotary import rotary_table, rotate_qk, rotate_rows
from vispe.positions import Positions, autocast_off, grid_coords, is_symbolic


def axial_frequencies(head_dim: int, ndim: int, theta: float) -> torch.Tensor:
    """w_k = 1 / theta^(k / (d / (2 ndim))), k < d / (2 ndim): for 2D, 1 / theta^(4k/d)."""
    if head_dim % (2 * ndim):
        raise ValueError(
            f'rotary encodings need a head dim (embed_dim / num_heads) divisible by {2 * ndim} for {ndim}D positions '
            f'(a pair of channels per frequency and axis), got {head_dim}; change embed_dim or num_heads'
        )
    return frequency_ladder(head_dim // (2 * ndim), theta)


def frequency_ladder(pairs: int, theta: float) -> torch.Tensor:
    """The (pairs,) float32 frequencies 1 / theta^(k / pairs), k < pairs: one axis' ladder, from 1 down towards
    1 / theta whatever the number of pairs."""
    return 1.0 / theta ** (torch.arange(pairs, dtype=torch.float32) / pairs)


def random_rotation(ndim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A uniformly random (ndim, ndim) rotation matrix (QR of a Gaussian matrix with the signs fixed, det +1)."""
    q, r = torch.linalg.qr(torch.randn(ndim, ndim, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q.float()


def rotary_sections(head_dim: int, ndim: int, sections: Sequence[int] | None = None) -> tuple[int, ...]:
    """Channel pairs per position axis, in coordinate order ((row, col) for images, (t, row, col) for video), summing
    to d/2. None: an even split; when d/2 does not divide by ndim, the last axes take one pair more (a head dim of 64
    in 3D: (10, 11, 11), time on the fewest). ValueError for an odd head dim or sections that do not fit."""
    if head_dim % 2 or head_dim < 2 * ndim:
        raise ValueError(
            f'rotary encodings need an even head dim (embed_dim / num_heads) of at least {2 * ndim} for {ndim}D '
            f'positions (a pair of channels per frequency, one or more per axis), got {head_dim}; change embed_dim '
            'or num_heads'
        )
    pairs = head_dim // 2
    if sections is None:
        base, extra = divmod(pairs, ndim)
        return tuple(base + (a >= ndim - extra) for a in range(ndim))
    sections = tuple(int(n) for n in sections)
    if len(sections) != ndim or min(sections) < 1 or sum(sections) != pairs:
        raise ValueError(
            f'sections={sections} must give each of the {ndim} position axes at least one channel pair and add up to '
            f'the head dim / 2 = {pairs}; e.g. sections={rotary_sections(head_dim, ndim)}'
        )
    return sections


def rotate_by_rows(
    q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, scale: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (B, H, T, d) rotated per token by a row of a small angle table: ``rows`` (R, [H,] d/2) angles, ``index``
    (B, T) each token's row, ``scale`` as in ``rotate_qk``. The values and gradients of rotating by the gathered
    table, without building it."""
    rows3 = rows if rows.dim() == 3 else rows.unsqueeze(1)
    return rotate_rows(q, k, rotary_table(rows3), index, scale)


def centroid_prefix(coords: torch.Tensor, num_prefix: int) -> tuple[torch.Tensor, int]:
    """Each sample's ``num_prefix`` prefix tokens placed at the mean of its token positions, (..., N, ndim) ->
    (..., num_prefix + N, ndim), so that a translated cloud rotates them alike; returns the coordinates and the prefix
    count left to the table (0)."""
    if not num_prefix:
        return coords, num_prefix
    centroid = coords.mean(dim=-2, keepdim=True)
    return torch.cat([centroid.expand(*coords.shape[:-2], num_prefix, -1), coords], dim=-2), 0


PREFIX_MODES = ('none', 'centroid')


class VectorRoPE(Encoding):
    """RoPE with frequency vectors on ndim-D coordinates: pair j of head h turns by sum_a x_a freqs[a, h, j].

    Prefix tokens pass unrotated (``prefix='none'``) or sit at their sample's centroid (``'centroid'``: every logit is
    then a function of position differences, so a translated cloud gives the same logits). Nothing is cached: the
    positions of points change with every sample. Not registered: rope3d and STRING build on it, and
    ``fold_string`` leaves one.

    Args:
        freqs: (ndim, H or 1, d/2) frequency vectors in coordinate order.
        prefix: 'none' or 'centroid'.
        learned: keep ``freqs`` as a parameter (else a non-persistent buffer).
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    needs_grid = False  # reads coordinates alone: points as well as grids
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ('freqs',)
    freqs: torch.Tensor

    def __init__(self, freqs: torch.Tensor, prefix: str = 'none', learned: bool = True) -> None:
        super().__init__()
        if prefix not in PREFIX_MODES:
            raise ValueError(f'{self.registry_name()}: prefix must be one of {list(PREFIX_MODES)}, got {prefix!r}')
        self.prefix = prefix
        if learned:
            self.freqs = nn.Parameter(freqs.float())
        else:
            self.register_buffer('freqs', freqs.float(), persistent=False)

    def frequencies(self) -> torch.Tensor:
        """(ndim, H or 1, d/2) float32 frequency vectors."""
        return self.freqs.float()

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., N, ndim) -> (..., H or 1, N, d/2) float32, without a matmul (autocast and TF32 leave it alone)."""
        freqs = self.frequencies()
        if not is_symbolic(coords.shape[-1]) and coords.shape[-1] != freqs.shape[0]:  # FX: no branch on a Proxy
            raise ValueError(
                f'{self.registry_name()} was built for {freqs.shape[0]}D positions but got {coords.shape[-1]}D; '
                f'build it with ndim={coords.shape[-1]}'
            )
        per_axis = coords.float()[..., None, :, :, None] * freqs.transpose(0, 1)[:, None]  # (..., H, N, ndim, d/2)
        return per_axis.sum(dim=-2)

    def table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table (..., H or 1, num_prefix + N, d/2, 2)."""
        coords, num_prefix = pos.coords.float(), pos.num_prefix
        if self.prefix == 'centroid':
            coords, num_prefix = centroid_prefix(coords, num_prefix)
        with autocast_off(coords):  # Circulant-STRING's rates are a matmul
            return rotary_table(self.angles(coords), num_prefix)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        return rotate_qk(q, k, self.table(pos))

    def extra_repr(self) -> str:
        return f'freqs={tuple(self.frequencies().shape)}, prefix={self.prefix}'


_T = TypeVar('_T')
#: the property ``Encoding.strategy`` itself (mypy reads ``Encoding.strategy`` as the getter, which has no setter)
_ENCODING_STRATEGY: property = vars(Encoding)['strategy']


class TrainGridStrategies(Encoding):
    """Resolution strategies that read the training grid: ``train_grid`` (``train_grid_from``; the backbone passes
    ``grid_size``) must be known for any strategy but ``none``."""

    train_grid: tuple[int, ...] | None = None
    #: what the strategies do with the training grid (the error's words)
    train_grid_use: ClassVar[str] = 'scales positions by the training grid'

    def _set_strategy(self, value: str) -> None:
        if value != 'none' and value in self.strategies and self.train_grid is None:
            raise ValueError(
                f'{self.registry_name()}: strategy {value!r} {self.train_grid_use}, and none is known; build it with '
                "grid_size=(h, w) (vispe's backbones pass it) or keep strategy 'none'"
            )
        _ENCODING_STRATEGY.__set__(self, value)  # the base setter: checks the name, stores it

    #: the base's property with this setter; its getter is the base's own (a getter calling super() breaks
    #: torch.compile's graph)
    strategy = _ENCODING_STRATEGY.setter(_set_strategy)


class GridRoPE(TrainGridStrategies):
    """The core of the rotary encodings on token grids with a training grid (module doc).

    A subclass sets ``self.train_grid`` (without one only ``none`` may be chosen) and defines ``scaled_angles``;
    ``fixed_frequencies`` says whether its tables may be cached per grid, ``shared_heads`` whether its angles have
    no head axis.
    """

    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate', 'ntk', 'yarn', 'yarn_paper', *DYPE_STRATEGIES)
    #: a sweep runs these only when named: DyPE follows the diffusion time (the generation sweep of a DiT), and
    #: yarn_paper is the variant of yarn
    opt_in_strategies: ClassVar[tuple[str, ...]] = ('yarn_paper', *DYPE_STRATEGIES)
    #: frequencies that never train: tables are cached per grid, prefix count, device and strategy
    fixed_frequencies: ClassVar[bool] = True
    #: angles (..., N, d/2) shared by the heads (else (..., H, N, d/2))
    shared_heads: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self._cache = GridTableCache()

    @property
    def yarn_ramp(self) -> str:
        """``yarn_factors``' ramp under the strategy: the paper's for ``yarn_paper``, else the references'."""
        return 'paper' if self.strategy == 'yarn_paper' else 'reference'

    def axis_scales(self, coords: torch.Tensor, grid: Sequence[float] | None = None) -> tuple[float, ...]:
        """The strategy's scale s_a per coordinate axis: extent_a / train_a for ``interpolate`` (below 1 too),
        max(1, extent_a / train_a) for ``ntk``, ``yarn`` and DyPE's, all 1 under ``none``. The extent is ``grid`` when
        given, else what the (..., N, ndim) coordinates span over the whole batch."""
        # a grid has one entry per axis even when traced (FX: the coordinates' shape is then unknown)
        ndim = len(grid) if grid is not None else coords.shape[-1]
        if self.strategy == 'none' or self.train_grid is None:
            return (1.0,) * ndim
        if grid is None:
            flat = coords.detach().reshape(-1, ndim).float()
            grid = (flat.amax(0) - flat.amin(0) + 1).tolist()
        ratios = [float(e) / t for e, t in zip(grid, self.train_grid)]
        if self.strategy == 'interpolate':
            return tuple(ratios)
        return tuple(max(1.0, r) for r in ratios)

    def strategy_factors(
        self,
        magnitudes: torch.Tensor,
        scale: float,
        train_len: float,
        groups: Sequence[int],
        kappa: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Multipliers of the frequencies ``magnitudes`` (..., n) that follow one axis of scale ``scale`` and training
        length ``train_len``, under the strategy; ``groups``: the pairs of each ladder along the last axis, within
        which the frequencies rank (0 = fastest). ``kappa``: DyPE's time factor (``dype_kappa``)."""
        if self.strategy == 'interpolate':
            return torch.full_like(magnitudes, 1.0 / scale)
        if self.strategy in ('ntk', 'dype_ntk'):
            ranks = frequency_ranks(magnitudes, groups).split(list(groups), dim=-1)
            per_group = [ntk_factors(r, scale, 2 * n, kappa) for r, n in zip(ranks, groups)]
            lead = torch.broadcast_shapes(*(p.shape[:-1] for p in per_group))  # DyPE: a batch axis on some
            return torch.cat([p.expand(*lead, p.shape[-1]) for p in per_group], dim=-1)
        if self.strategy == 'dype_yarn':
            assert kappa is not None  # dype_kappa gives one under DyPE
            return dype_yarn_factors(magnitudes, scale, train_len, kappa, groups)
        return yarn_factors(magnitudes, scale, train_len, groups, self.yarn_ramp)

    def dype_kappa(self, pos: Positions) -> torch.Tensor | None:
        """DyPE's kappa(t) = t^2 of the positions' diffusion time, float32, () or (B, 1, 1) for a time per sample;
        None under any other strategy. ValueError when the positions carry no time, or are a mixed-size batch."""
        if self.strategy not in DYPE_STRATEGIES:
            return None
        name = type(self).__name__
        if pos.noise_level is None:
            raise ValueError(
                f'{name}: strategy {self.strategy!r} follows the diffusion time, and these positions carry none; it is '
                "a sampling strategy of the DiT, whose sampler sets the time: use 'ntk' or 'yarn' elsewhere"
            )
        if pos.layout is not None:
            raise ValueError(f'{name}: strategy {self.strategy!r} takes one image size per batch, not a mixed batch')
        level = pos.noise_level.float().clamp(0.0, 1.0).to(pos.coords.device)
        kappa = level**DYPE_TIME_EXPONENT
        return kappa.reshape(-1, 1, 1) if kappa.dim() else kappa

    def scale_groups(self, pos: Positions) -> dict[tuple[float, ...], list[int]]:
        """A mixed batch: the per-axis scales of each image grid, and which of ``layout.distinct_grids`` have them."""
        assert pos.layout is not None
        groups: dict[tuple[float, ...], list[int]] = {}
        for i, grid in enumerate(pos.layout.distinct_grids):
            groups.setdefault(self.axis_scales(pos.coords, grid), []).append(i)
        return groups

    def angles(
        self,
        coords: torch.Tensor,
        grid: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        kappa: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(..., N, ndim) coordinates -> (..., [H,] N, d/2) float32 angles at ``scales`` (None: those of ``grid``, the
        token grid, or without one of the coordinates' extent); under a DyPE strategy at ``kappa`` (per sample: a
        batch axis in front)."""
        return self.scaled_angles(coords, self.axis_scales(coords, grid) if scales is None else scales, kappa, grid)

    def scaled_angles(
        self, coords: torch.Tensor, scales: Sequence[float], kappa: torch.Tensor | None, grid: Sequence[int] | None
    ) -> torch.Tensor:
        """``angles`` at the given scales: what a subclass defines."""
        raise NotImplementedError

    def check_positions(self, pos: Positions) -> None:
        """ValueError for positions the encoding cannot take (nothing here)."""

    def rotation_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table of ``pos`` (prefix rows (1, 0)), (..., [H,] N_total, d/2, 2): ``angles`` at the
        scales of the positions' grid, or in a mixed batch at each image's own (``image_angles``)."""
        return rotary_table(self.image_angles(pos), pos.num_prefix)

    def image_angles(self, pos: Positions) -> torch.Tensor:
        """``angles`` of the positions at the scales of their grid; in a mixed batch each token's at its own image's
        (one call per distinct scales, selected per token; padding takes the first)."""
        kappa = self.dype_kappa(pos)  # refuses a mixed batch under DyPE
        if pos.layout is None:
            return self.angles(pos.coords, scales=self.axis_scales(pos.coords, pos.grid_span), kappa=kappa)
        groups = self.scale_groups(pos)
        if len(groups) == 1:
            return self.angles(pos.coords, scales=next(iter(groups)))
        grid_index = pos.layout.token_tables(pos.coords.device)['grid_index']  # (B, T)
        out: torch.Tensor | None = None
        for scales, ids in groups.items():
            values = self.angles(pos.coords, scales=scales)  # (B, T, d/2), or (B, H, T, d/2)
            if out is None:
                out = values
                continue
            mask = torch.isin(grid_index, torch.tensor(ids, device=grid_index.device))[..., None]
            while mask.dim() < values.dim():
                mask = mask.unsqueeze(1)
            out = torch.where(mask, values, out)
        assert out is not None
        return out

    def grid_angles(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch on its grids' own coordinates: ``angles`` once per distinct grid at that grid's scales, as
        rows (R, [H,] d/2) float32 (the grids' cells one after the other, then a zero row: no rotation), and each
        token's row, (B, T) long (prefix and padding tokens: the zero row)."""
        layout = pos.layout
        assert layout is not None
        self.dype_kappa(pos)  # refuses a mixed batch under DyPE
        device = pos.coords.device
        groups = self.scale_groups(pos)
        if len(groups) == 1:
            cells, _ = layout.grid_cells(device)  # every distinct grid's cells, grid after grid (cached)
            angles = self.angles(cells, scales=next(iter(groups)))  # (..., n, d/2)
        else:
            angles = torch.cat(
                [
                    self.angles(grid_coords(*grid, device=device), scales=self.axis_scales(pos.coords, grid))
                    for grid in layout.distinct_grids
                ],
                dim=-2,
            )
        rows = F.pad(angles, [0, 0, 0, 1])  # the zero row of prefix and padding tokens
        return rows.movedim(-2, 0), layout.table_index(device)

    def grid_rows(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch's (cos, sin) rows (R, 1 or H, d/2, 2) per distinct grid cell and each token's row (B, T)."""
        rows, index = self.grid_angles(pos)
        return rotary_table(rows.unsqueeze(1) if self.shared_heads else rows), index

    def cached(self, pos: Positions, build: Callable[[Positions], _T], *what: str) -> _T:
        """``build(pos)``, kept per grid when the frequencies are fixed (and the strategy does not follow the
        diffusion time)."""
        if not self.fixed_frequencies or self.strategy in DYPE_STRATEGIES:
            return build(pos)
        return self._cache.get(pos.cache_key(self.strategy, *what), lambda: build(pos))

    def table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table with a head axis in front of the tokens, (..., 1 or H, N_total, d/2, 2)."""
        table = self.cached(pos, self.rotation_table)
        return table.unsqueeze(-4) if self.shared_heads else table

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_positions(pos)
        scale = self.qk_scales(pos)
        if pos.layout is not None and pos.key is not None:  # a mixed batch on its grids: rows per grid cell
            rows, index = self.cached(pos, self.grid_rows, 'rows')
            return rotate_rows(q, k, rows, index, scale)
        return rotate_qk(q, k, self.table(pos), scale)

    def qk_scales(self, pos: Positions) -> float | torch.Tensor:
        """``qk_scale`` of the positions' grid; in a mixed batch of several scales, per token (B, 1, T, 1)."""
        if pos.layout is None:
            return self.qk_scale(self.axis_scales(pos.coords, pos.grid_span))
        layout = pos.layout
        per_grid = {grid: self.qk_scale(self.axis_scales(pos.coords, grid)) for grid in layout.distinct_grids}
        if len(set(per_grid.values())) == 1:
            return next(iter(per_grid.values()))
        return layout.segment_values([per_grid[g] for g in layout.grids], pos.coords.device)[:, None, :, None]

    def qk_scale(self, scales: Sequence[float]) -> float:
        """What q and k are each multiplied by after rotation: 0.1 ln s + 1 (``yarn_mscale``) at the geometric mean
        of the scales for ``yarn``, ``yarn_paper`` and ``dype_yarn``, else 1."""
        if self.strategy not in ('yarn', 'yarn_paper', 'dype_yarn') or all(s == 1.0 for s in scales):
            return 1.0
        geometric_mean = math.exp(sum(math.log(s) for s in scales) / len(scales))
        return yarn_mscale(geometric_mean)


#: the former name of ``GridRoPE``
RotaryStrategies = GridRoPE


def train_grid_from(grid_size: Sequence[int] | None, ndim: int) -> tuple[int, ...] | None:
    """The training grid as a tuple of ndim ints (None stays None)."""
    if grid_size is None:
        return None
    grid = tuple(int(g) for g in grid_size)
    if len(grid) != ndim or min(grid) < 1:
        raise ValueError(f'grid_size must be {ndim} positive ints (one per position axis), got {tuple(grid_size)}')
    return grid


__all__ = [
    'GridRoPE',
    'RotaryStrategies',
    'TrainGridStrategies',
    'VectorRoPE',
    'axial_frequencies',
    'centroid_prefix',
    'frequency_ladder',
    'random_rotation',
    'rotary_sections',
    'rotate_by_rows',
    'train_grid_from',
]
