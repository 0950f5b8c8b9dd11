"""The rotary core. Every rotary encoding turns channel pairs (2j, 2j+1) of q and k by angles that are sums of
coordinate x frequency, through one (cos, sin) table and ``vispe.kernels.rotary``. ``VectorRoPE``: frequency vectors
on any coordinates (rope3d, STRING). ``GridRoPE``: encodings on token grids with a training grid (rope_axial,
rope_mixed, HARoPE, the video RoPEs): the resolution strategies by frequency rank (``strategy_factors``, maths in
``vispe.encodings.rotary_scaling``), the per-grid table and its cache, mixed-size batches by rows, YaRN's scale.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache
from vispe.encodings.rotary_scaling import (
    DYPE_STRATEGIES,
    DYPE_TIME_EXPONENT,
    axial_frequencies,
    dype_yarn_factors,
    frequency_ladder,
    frequency_ranks,
    ntk_factors,
    random_rotation,
    rotary_sections,
    train_grid_from,
    yarn_factors,
    yarn_mscale,
)
from vispe.kernels.rotary import cos_sin_table, rotate_qk, rotate_qk_rows
from vispe.positions import Positions, autocast_off, grid_coords, is_symbolic


def rotate_by_angle_rows(
    q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, scale: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (B, H, T, d) rotated per token by a row of ``rows`` (R, [H,] d/2) angles, ``index`` (B, T) each
    token's row, without gathering the table."""
    rows3 = rows if rows.dim() == 3 else rows.unsqueeze(1)
    return rotate_qk_rows(q, k, cos_sin_table(rows3), index, scale)


def centroid_prefix(coords: torch.Tensor, num_prefix: int) -> tuple[torch.Tensor, int]:
    """Prefix tokens at the mean of their sample's positions: (..., N, ndim) -> (..., num_prefix + N, ndim), and the
    prefix count left to the table (0)."""
    if not num_prefix:
        return coords, num_prefix
    centroid = coords.mean(dim=-2, keepdim=True)
    return torch.cat([centroid.expand(*coords.shape[:-2], num_prefix, -1), coords], dim=-2), 0


PREFIX_MODES = ('none', 'centroid')


class VectorRoPE(Encoding):
    """RoPE with frequency vectors: pair j of head h turns by sum_a x_a freqs[a, h, j]; prefix tokens unrotated
    (``prefix='none'``) or at their sample's centroid (``'centroid'``). Nothing is cached.

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
        """(..., N, ndim) -> (..., H or 1, N, d/2) float32, matmul-free (autocast and TF32 leave it alone)."""
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
            return cos_sin_table(self.angles(coords), num_prefix)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        return rotate_qk(q, k, self.table(pos))

    def extra_repr(self) -> str:
        return f'freqs={tuple(self.frequencies().shape)}, prefix={self.prefix}'


_T = TypeVar('_T')
#: the property ``Encoding.strategy`` itself (mypy reads ``Encoding.strategy`` as the getter, which has no setter)
_ENCODING_STRATEGY: property = vars(Encoding)['strategy']


class TrainGridStrategies(Encoding):
    """Resolution strategies that need ``train_grid`` (the backbone's ``grid_size``) for any strategy but ``none``."""

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

    #: the base's getter (a getter calling super() breaks torch.compile's graph) with this setter
    strategy = _ENCODING_STRATEGY.setter(_set_strategy)


class GridRoPE(TrainGridStrategies):
    """The core of the rotary encodings on token grids (module doc): a subclass sets ``train_grid`` and defines
    ``scaled_angles``."""

    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate', 'ntk', 'yarn', 'yarn_paper', *DYPE_STRATEGIES)
    #: run by a sweep only when named: DyPE follows a DiT sampler's time, yarn_paper is a variant
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
        """``yarn_factors``' ramp: the paper's for ``yarn_paper``, else the references'."""
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
        """Multipliers of the frequencies ``magnitudes`` (..., n) of one axis under the strategy; ``groups``: the pairs
        of each ladder along the last axis, within which the frequencies rank (0 = fastest)."""
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
        """DyPE's kappa(t) = t^2, () or (B, 1, 1); None under another strategy. ValueError without a time, or for a
        mixed-size batch."""
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
        """(..., N, ndim) -> (..., [H,] N, d/2) float32 angles at ``scales`` (None: those of ``grid``, else of the
        coordinates' extent), under DyPE at ``kappa``."""
        return self.scaled_angles(coords, self.axis_scales(coords, grid) if scales is None else scales, kappa, grid)

    def scaled_angles(
        self, coords: torch.Tensor, scales: Sequence[float], kappa: torch.Tensor | None, grid: Sequence[int] | None
    ) -> torch.Tensor:
        """``angles`` at the given scales: what a subclass defines."""
        raise NotImplementedError

    def check_positions(self, pos: Positions) -> None:
        """ValueError for positions the encoding cannot take (nothing here)."""

    def build_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table (..., [H,] N_total, d/2, 2) at the scales of the positions' grid (each image's own in
        a mixed batch)."""
        return cos_sin_table(self.token_angles(pos), pos.num_prefix)

    def token_angles(self, pos: Positions) -> torch.Tensor:
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

    def cell_angles(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch: ``angles`` once per distinct grid cell as rows (R, [H,] d/2), then a zero row (prefix and
        padding), and each token's row (B, T)."""
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

    def build_rows(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch's (cos, sin) rows (R, 1 or H, d/2, 2) per distinct grid cell and each token's row (B, T)."""
        rows, index = self.cell_angles(pos)
        return cos_sin_table(rows.unsqueeze(1) if self.shared_heads else rows), index

    def cached(self, pos: Positions, build: Callable[[Positions], _T], *what: str) -> _T:
        """``build(pos)``, kept per grid when the frequencies are fixed and the strategy ignores the diffusion time."""
        if not self.fixed_frequencies or self.strategy in DYPE_STRATEGIES:
            return build(pos)
        return self._cache.get(pos.cache_key(self.strategy, *what), lambda: build(pos))

    def table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table with a head axis in front of the tokens, (..., 1 or H, N_total, d/2, 2)."""
        table = self.cached(pos, self.build_table)
        return table.unsqueeze(-4) if self.shared_heads else table

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_positions(pos)
        scale = self.qk_scale(pos)
        if pos.layout is not None and pos.on_grid_cells:  # a mixed batch on its grids: rows per grid cell
            rows, index = self.cached(pos, self.build_rows, 'rows')
            return rotate_qk_rows(q, k, rows, index, scale)
        return rotate_qk(q, k, self.table(pos), scale)

    def qk_scale(self, pos: Positions) -> float | torch.Tensor:
        """``mscale`` of the positions' grid; in a mixed batch of several scales, per token (B, 1, T, 1)."""
        if pos.layout is None:
            return self.mscale(self.axis_scales(pos.coords, pos.grid_span))
        layout = pos.layout
        per_grid = {grid: self.mscale(self.axis_scales(pos.coords, grid)) for grid in layout.distinct_grids}
        if len(set(per_grid.values())) == 1:
            return next(iter(per_grid.values()))
        return layout.segment_values([per_grid[g] for g in layout.grids], pos.coords.device)[:, None, :, None]

    def mscale(self, scales: Sequence[float]) -> float:
        """q's and k's factor after rotation: 0.1 ln s + 1 at the scales' geometric mean for the YaRNs, else 1."""
        if self.strategy not in ('yarn', 'yarn_paper', 'dype_yarn') or all(s == 1.0 for s in scales):
            return 1.0
        geometric_mean = math.exp(sum(math.log(s) for s in scales) / len(scales))
        return yarn_mscale(geometric_mean)


def __getattr__(name: str) -> type:
    if name == 'RotaryStrategies':  # the former name of GridRoPE
        warnings.warn('RotaryStrategies is deprecated: use GridRoPE', DeprecationWarning, stacklevel=2)
        return GridRoPE
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = [
    'GridRoPE',
    'TrainGridStrategies',
    'VectorRoPE',
    'axial_frequencies',
    'centroid_prefix',
    'frequency_ladder',
    'random_rotation',
    'rotary_sections',
    'rotate_by_angle_rows',
    'train_grid_from',
]
