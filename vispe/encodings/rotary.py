"""The rotary maths the rotary encodings share (rope_axial, rope_mixed, dinov3, comrope, harope, gta): axial
frequencies, rotation by rows of a small table, and the resolution strategies' scales with ``RotaryStrategies``, the
machinery every rotary encoding with a training grid inherits. The rotation itself is ``vispe.kernels.rotary``.

Resolution strategies (``strategy``; the backbone supplies the training grid as ``grid_size``). Per axis a the
ratio is r_a = extent_a / train_a, the extent being the grid's span (``Positions.grid_span``: ``pos.grid`` times a
video's time spacing; without a grid, the number of integer positions the coordinates span); ``axis_scales`` turns
it into the scale s_a each strategy uses, one per axis (a 2:1 target scales rows and columns separately; a video's
frame count and frame size likewise). An axis with s_a = 1 is untouched. d_a = the rotary dims of axis a
(head_dim / ndim on images; twice its section's pairs on video, ``rotary_sections``), w_k the frequency of pair
k < d_a / 2.

- ``none``: integer positions simply extend or stop short (the default); s_a = 1 at every size.
- ``interpolate``: position interpolation (PI; Chen et al. 2023), positions / s_a, i.e. w_k / s_a, with s_a = r_a
  above and below the training size: a grid of any size is stretched onto the training range, token p landing
  at p * train_a / extent_a (a 4x4 grid's tokens on the even positions of an 8x8 training grid, each covering the
  same fraction of the image). This is the only strategy that acts below the training size.
- ``ntk``: NTK-aware scaling (bloc97 2023): theta' = theta * s_a^(d_a / (d_a - 2)), which multiplies w_k by
  s_a^(-2k / (d_a - 2)): the fastest pair is kept, the slowest divided by exactly s_a.
- ``yarn``: YaRN (Peng et al. 2023): w'_k = (1 - g_k) w_k / s_a + g_k w_k with
  g_k = clamp((r_k - 1) / (32 - 1), 0, 1) and r_k = L_train,a w_k / (2 pi) the rotations of pair k over the
  training extent; q and k are each multiplied by the paper's sqrt(1/t) = 0.1 ln s + 1 after rotation (``yarn_mscale``;
  the logits grow by its square, as in transformers' YaRN, which scales cos and sin by it), with s the geometric mean of
  the axis scales (= s for a uniform zoom; our choice for aspect changes). Departure: the authors' code (and HF
  transformers') ramps g linearly over the pair index between the pairs at 32 and 1 rotations; vispe's ramp is the
  paper's equation, linear in r_k, which also serves learned frequencies that have no index order.

- ``dype_ntk``, ``dype_yarn``: DyPE (Issachar et al. 2025, "Dynamic Position Extrapolation for Ultra High
  Resolution Diffusion"), sampling-time schedules of the two for diffusion transformers, which follow the diffusion
  time t in [0, 1] (1: pure noise, 0: data; ``Positions.noise_level``, set by the DiT from its sampler). With
  kappa(t) = t^2 (the authors' lambda_t = 2): ``dype_yarn`` multiplies YaRN's ramp thresholds (beta_slow = 1,
  beta_fast = 32 rotations) by kappa(t), so g_k = clamp((r_k - kappa beta_slow) / (kappa (beta_fast - beta_slow)),
  0, 1): plain YaRN at t = 1, and as t -> 0 every pair's g_k -> 1, the trained frequencies, for the last steps,
  which form the fine detail (low frequencies settle early in sampling, high ones late); the temperature
  0.1 ln s + 1 stays at every t. ``dype_ntk`` raises NTK's base factor to 2 kappa(t)
  (lambda_s = 2): theta' = theta (s_a^(d_a / (d_a - 2)))^(2 kappa(t)), twice NTK's exponent at t = 1 (the
  authors' choice) and theta itself at t = 0. Departure: the authors apply the schedule to a two-ramp "vision
  YaRN" (an NTK blend at 1.25 / 0.75 rotations, then a return to the base at 16 / 2); vispe's YaRN is the
  one-ramp form above, and the schedule scales its thresholds the same way. The time is a tensor, so the tables
  follow it inside a compiled graph without a recompilation per step; they are not cached.

``ntk`` and ``yarn`` (and their DyPE schedules) take s_a = max(1, r_a): below the training size they are ``none``
on that axis (a 1:2 target at the training token count, 4x16 for 8x8, is scaled on its columns only). Both are
defined for s >= 1 and fix one failure, angles beyond the range a pair turned through in training, which a smaller
grid never reaches. Their mirror images (s < 1 in the same formulas) would be a partial interpolation that stretches
the slow pairs and keeps the fast ones, and YaRN's temperature would drop below 1: new methods with no paper behind
them, while what a smaller grid changes (the content spans fewer tokens) is what ``interpolate`` addresses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F

from vispe.encodings.base import Encoding
from vispe.kernels.rotary import rotary_table, rotate_rows
from vispe.positions import Positions, grid_coords

#: YaRN's ramp, in rotations over the training extent: pairs above BETA_FAST extrapolate, below BETA_SLOW interpolate
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
#: DyPE's schedule (module doc): kappa(t) = t^DYPE_TIME_EXPONENT; dype_ntk raises NTK's factor to DYPE_SCALE kappa
DYPE_TIME_EXPONENT = 2.0
DYPE_SCALE = 2.0
#: the strategies that follow the diffusion time
DYPE_STRATEGIES = ('dype_ntk', 'dype_yarn')


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


# --- extrapolation strategies: pure functions of the scale s of one axis ------------------------------------------
def ntk_theta(theta: float, scale: float, axis_dims: int) -> float:
    """NTK-aware base: theta' = theta * s^(d_a / (d_a - 2)), d_a = rotary dims per axis."""
    if axis_dims <= 2:  # one pair per axis: its frequency is theta^0 = 1 whatever the base
        return theta
    return theta * scale ** (axis_dims / (axis_dims - 2))


def ntk_factors(ranks: torch.Tensor, scale: float, axis_dims: int, kappa: torch.Tensor | None = None) -> torch.Tensor:
    """Multipliers s^(-2k / (d_a - 2)) for pairs of frequency rank k (0 = fastest): what ``ntk_theta`` does to
    w_k = 1 / theta^(2k / d_a), for frequencies that have no theta (learned ones). With DyPE's ``kappa`` (a tensor
    of any shape that broadcasts in front of ``ranks``' dims), the exponent is multiplied by DYPE_SCALE kappa."""
    if axis_dims <= 2:
        return torch.ones_like(ranks, dtype=torch.float32)
    exponent = -2.0 * ranks.float() / (axis_dims - 2)
    if kappa is not None:
        exponent = exponent * (DYPE_SCALE * kappa)
    return scale**exponent


def yarn_factors(
    freqs: torch.Tensor, scale: float, train_len: float, kappa: torch.Tensor | None = None
) -> torch.Tensor:
    """YaRN multipliers (1 - g_k) / s + g_k for angular frequencies ``freqs`` (any shape; their magnitude counts).

    r_k = L_train |w_k| / (2 pi) rotations over the training extent; g_k = clamp((r_k - beta_slow) /
    (beta_fast - beta_slow), 0, 1): pairs turning >= 32 times keep their frequency, <= 1 time are divided by s.
    With DyPE's ``kappa`` (a tensor that broadcasts in front of ``freqs``' dims) both thresholds are multiplied by
    it; kappa = 0 keeps every frequency (g_k = 1; a zero frequency has no angle to keep).
    """
    rotations = train_len * freqs.detach().abs().float() / (2 * math.pi)
    if kappa is None:
        gamma = ((rotations - YARN_BETA_SLOW) / (YARN_BETA_FAST - YARN_BETA_SLOW)).clamp(0.0, 1.0)
    else:
        width = (kappa * (YARN_BETA_FAST - YARN_BETA_SLOW)).clamp_min(1e-12)  # kappa = 0: every ramp a step at 0
        gamma = ((rotations - kappa * YARN_BETA_SLOW) / width).clamp(0.0, 1.0)
    return (1.0 - gamma) / scale + gamma


def yarn_mscale(scale: float) -> float:
    """YaRN's attention temperature (Peng et al. 2023): sqrt(1/t) = 0.1 ln s + 1, what q and k are each multiplied
    by, so that the logits grow by (0.1 ln s + 1)^2; 1 for s <= 1."""
    return 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0


def frequency_ranks(magnitudes: torch.Tensor, groups: int | Sequence[int]) -> torch.Tensor:
    """Rank (0 = largest) of each of the (..., P) magnitudes within its block of consecutive pairs: ``groups``
    blocks of P / groups pairs, or blocks of the given sizes (summing to P)."""
    if isinstance(groups, int):
        blocks = magnitudes.reshape(*magnitudes.shape[:-1], groups, -1)
        ranks = blocks.argsort(dim=-1, descending=True).argsort(dim=-1)
        return ranks.reshape(magnitudes.shape)
    parts = magnitudes.split(list(groups), dim=-1)
    return torch.cat([p.argsort(dim=-1, descending=True).argsort(dim=-1) for p in parts], dim=-1)


#: the property ``Encoding.strategy`` itself (mypy reads ``Encoding.strategy`` as the getter, which has no setter)
_ENCODING_STRATEGY: property = vars(Encoding)['strategy']


class RotaryStrategies(Encoding):
    """The strategy machinery shared by the rotary encodings: training grid, per-axis scales, logit scale.

    Subclasses set ``self.train_grid`` with ``train_grid_from``; without one only ``none`` may be chosen.
    """

    strategies: ClassVar[tuple[str, ...]] = ('none', 'interpolate', 'ntk', 'yarn', *DYPE_STRATEGIES)
    #: DyPE follows the diffusion time: a sweep runs it only when named (the generation sweep of a DiT)
    opt_in_strategies: ClassVar[tuple[str, ...]] = DYPE_STRATEGIES
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
        if self.strategy not in ('yarn', 'dype_yarn') or all(s == 1.0 for s in scales):
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
    'YARN_BETA_FAST',
    'YARN_BETA_SLOW',
    'RotaryStrategies',
    'axial_frequencies',
    'frequency_ladder',
    'frequency_ranks',
    'ntk_factors',
    'ntk_theta',
    'random_rotation',
    'rotary_sections',
    'rotate_by_rows',
    'train_grid_from',
    'yarn_factors',
    'yarn_mscale',
]
