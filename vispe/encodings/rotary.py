"""The rotary maths the rotary encodings share (rope_axial, rope_mixed, dinov3, comrope, harope, gta): axial
frequencies, rotation by rows of a small table, and the resolution strategies' scales with ``RotaryStrategies``, the
machinery every rotary encoding with a training grid inherits. The rotation itself is ``vispe.kernels.rotary``.

Resolution strategies (``strategy``): their frequency maths and the references they follow are in
``vispe.encodings.rotary_scaling``; ``RotaryStrategies`` turns a grid into the scales they take.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F

from vispe.encodings.base import Encoding
from vispe.encodings.rotary_scaling import DYPE_STRATEGIES, DYPE_TIME_EXPONENT, yarn_mscale
from vispe.kernels.rotary import rotary_table, rotate_rows
from vispe.positions import Positions, grid_coords


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
    """q and k (B, H, T, d) rotated per token by a row of a small angle table: ``rows`` (R, [H,] d/2) angles (one
    row per distinct position, shared by the heads or one per head), ``index`` (B, T) each token's row, ``scale``
    as in ``rotate_qk`` (a float, or per token (B, 1, T, 1)). The same values and gradients as rotating by the
    gathered table, without building it (``vispe.kernels.rotary.rotate_rows``)."""
    rows3 = rows if rows.dim() == 3 else rows.unsqueeze(1)
    return rotate_rows(q, k, rotary_table(rows3), index, scale)


#: the property ``Encoding.strategy`` itself (mypy reads ``Encoding.strategy`` as the getter, which has no setter)
_ENCODING_STRATEGY: property = vars(Encoding)['strategy']


class RotaryStrategies(Encoding):
    """The strategy machinery shared by the rotary encodings: training grid, per-axis scales, logit scale.

    Subclasses set ``self.train_grid`` with ``train_grid_from``; without one only ``none`` may be chosen.
    """

    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate', 'ntk', 'yarn', 'yarn_paper', *DYPE_STRATEGIES)
    #: a sweep runs these only when named: DyPE follows the diffusion time (the generation sweep of a DiT), and
    #: yarn_paper is the variant of yarn
    opt_in_strategies: ClassVar[tuple[str, ...]] = ('yarn_paper', *DYPE_STRATEGIES)
    train_grid: tuple[int, ...] | None = None

    def _set_strategy(self, value: str) -> None:
        if value != 'none' and value in self.strategies and self.train_grid is None:
            raise ValueError(
                f'{type(self).__name__}: strategy {value!r} scales positions by the training grid, and none is known; '
                "build it with grid_size=(h, w) (vispe's backbones pass it) or keep strategy 'none'"
            )
        _ENCODING_STRATEGY.__set__(self, value)  # the base setter: checks the name, stores it

    #: the base's property with this setter; its getter is the base's own (a getter calling super() breaks
    #: torch.compile's graph)
    strategy = _ENCODING_STRATEGY.setter(_set_strategy)

    @property
    def yarn_ramp(self) -> str:
        """``yarn_factors``' ramp under the strategy: the paper's for ``yarn_paper``, else the references'."""
        return 'paper' if self.strategy == 'yarn_paper' else 'reference'

    def axis_scales(self, coords: torch.Tensor, grid: Sequence[float] | None = None) -> tuple[float, ...]:
        """The strategy's scale s_a per coordinate axis, (row, col) for images (module doc): extent_a / train_a for
        ``interpolate`` (below 1 too), max(1, extent_a / train_a) for ``ntk`` and ``yarn``, all 1 under ``none``.

        The extent is ``grid`` when given, else the integer positions the (..., N, ndim) coordinates span
        (max - min + 1, over the whole batch: one scale for every sample). The one place a grid becomes scales.
        """
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
        return tuple(max(1.0, r) for r in ratios)  # ntk, yarn and their DyPE schedules: s >= 1 (module doc)

    def dype_kappa(self, pos: Positions) -> torch.Tensor | None:
        """DyPE's kappa(t) = t^2 of the positions' diffusion time, float32, () or (B, 1, 1) for a time per sample
        (it then broadcasts in front of per-axis frequencies); None under any other strategy. ValueError when the
        positions carry no time, or are a mixed-size batch."""
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
        """A mixed batch (``pos.layout``): the per-axis scales of each image grid (``axis_scales`` of that grid),
        and which of ``layout.distinct_grids`` have them."""
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
        """(..., N, ndim) coordinates -> (..., [H,] N, d/2) float32 angles at ``scales`` (None: those of ``grid``);
        under a DyPE strategy at ``kappa`` (``dype_kappa``; per sample: a batch axis in front)."""
        raise NotImplementedError

    def rotation_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table of ``pos`` (prefix rows (1, 0)), (..., [H,] N_total, d/2, 2): ``angles`` at the
        scales of the positions' grid, or in a mixed batch at each image's own (``image_angles``). A mixed batch on
        its own grids rotates by rows instead (``grid_angles``), never through this table."""
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
        """A mixed batch on its grids' own coordinates (``pos.layout``, not sampled): ``angles`` computed once per
        distinct grid at that grid's scales, as rows (R, [H,] d/2) float32 (the grids' cells one after the other,
        then a zero row: no rotation), and each token's row, (B, T) long (prefix and padding tokens: the zero row).
        Grids at the same scales (all of them under ``none``) share one ``angles`` call on their cells."""
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

    def qk_scales(self, pos: Positions) -> float | torch.Tensor:
        """``qk_scale`` of the positions' grid; in a mixed batch of several scales, per token (prefix tokens their
        image's): (B, 1, T, 1)."""
        if pos.layout is None:
            return self.qk_scale(self.axis_scales(pos.coords, pos.grid_span))
        layout = pos.layout
        per_grid = {grid: self.qk_scale(self.axis_scales(pos.coords, grid)) for grid in layout.distinct_grids}
        if len(set(per_grid.values())) == 1:
            return next(iter(per_grid.values()))
        return layout.segment_values([per_grid[g] for g in layout.grids], pos.coords.device)[:, None, :, None]

    def qk_scale(self, scales: Sequence[float]) -> float:
        """What q and k are each multiplied by after rotation: 0.1 ln s + 1 (``yarn_mscale``) for ``yarn`` and
        ``dype_yarn``, else 1."""
        if self.strategy not in ('yarn', 'yarn_paper', 'dype_yarn') or all(s == 1.0 for s in scales):
            return 1.0
        geometric_mean = math.exp(sum(math.log(s) for s in scales) / len(scales))
        return yarn_mscale(geometric_mean)


def train_grid_from(grid_size: Sequence[int] | None, ndim: int) -> tuple[int, ...] | None:
    """The training grid as a tuple of ndim ints (None stays None)."""
    if grid_size is None:
        return None
    grid = tuple(int(g) for g in grid_size)
    if len(grid) != ndim or min(grid) < 1:
        raise ValueError(f'grid_size must be {ndim} positive ints (one per position axis), got {tuple(grid_size)}')
    return grid


__all__ = [
    'RotaryStrategies',
    'axial_frequencies',
    'frequency_ladder',
    'random_rotation',
    'rotary_sections',
    'rotate_by_rows',
    'train_grid_from',
]
