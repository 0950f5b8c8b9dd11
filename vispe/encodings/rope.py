"""Rotary position embeddings for vision: axial and mixed (Heo et al., "Rotary Position Embedding for
Vision Transformer", ECCV 2024), with resolution strategies for grids larger or smaller than the training grid.

Channel layout follows timm's naver-ai RoPE-ViT models, so their weights load unchanged: pairs are
interleaved (channels 2j, 2j+1 form pair j) and, for images, the first half of the pairs rotates with the
column (x) and the second half with the row (y). The rotation is ``vispe.kernels.rotary``: a real (cos, sin) table,
the fused Triton kernel on CUDA (q and k in one pass), one complex multiplication per tensor in CPU eager mode, and
real-valued ops that Inductor fuses under ``torch.compile`` (no complex dtype in a compiled graph). Prefix tokens are
left unrotated ((1, 0) rows in the table, which avoids slicing q and k). Angles and the rotation are computed in
float32 even under autocast. Hook: rotate, q and k (B, H, N_total, d) -> same.

Cost: CPU, 1.01x ape_learned (ViT-S/16 224, batch 8, float32; README). GPU: one read and write of q and k by the
kernel plus a (N, d/2) table per grid (cached); not yet measured on a GPU with the kernel (1.28x before it).

Resolution strategies (``strategy``; the backbone supplies the training grid as ``grid_size``). Per axis a the
ratio is r_a = extent_a / train_a, the extent being ``pos.grid`` (or, without a grid, the number of integer
positions the coordinates span); ``axis_scales`` turns it into the scale s_a each strategy uses, one per axis (a
2:1 target scales rows and columns separately). An axis with s_a = 1 is untouched. d_a = head_dim / ndim rotary
dims per axis, w_k the frequency of pair k < d_a / 2.

- ``none``: integer positions simply extend or stop short (the default); s_a = 1 at every size.
- ``interpolate``: position interpolation (PI; Chen et al. 2023), positions / s_a, i.e. w_k / s_a, with s_a = r_a
  above and below the training size: a grid of any size is stretched onto the training range, token p landing
  at p * train_a / extent_a (a 4x4 grid's tokens on the even positions of an 8x8 training grid, each covering the
  same fraction of the image). This is the only strategy that acts below the training size.
- ``ntk``: NTK-aware scaling (bloc97 2023): theta' = theta * s_a^(d_a / (d_a - 2)), which multiplies w_k by
  s_a^(-2k / (d_a - 2)): the fastest pair is kept, the slowest divided by exactly s_a.
- ``yarn``: YaRN (Peng et al. 2023): w'_k = (1 - g_k) w_k / s_a + g_k w_k with
  g_k = clamp((r_k - 1) / (32 - 1), 0, 1) and r_k = L_train,a w_k / (2 pi) the rotations of pair k over the
  training extent; q and k are each multiplied by sqrt(0.1 ln s + 1) after rotation (logits by 0.1 ln s + 1),
  with s the geometric mean of the axis scales (= s for a uniform zoom; our choice for aspect changes).

``ntk`` and ``yarn`` take s_a = max(1, r_a): below the training size they are ``none`` on that axis (a 1:2 target
at the training token count, 4x16 for 8x8, is scaled on its columns only). Both are defined for s >= 1 and fix
one failure, angles beyond the range a pair turned through in training, which a smaller grid never reaches. Their
mirror images (s < 1 in the same formulas) would be a partial interpolation that stretches the slow pairs and keeps
the fast ones, and YaRN's temperature would drop below 1: new methods with no paper behind them, while what a
smaller grid changes (the content spans fewer tokens) is what ``interpolate`` addresses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from timm.layers.pos_embed_sincos import init_random_2d_freqs
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache, check_positive
from vispe.kernels.rotary import rotary_table, rotate_pairs, rotate_qk, rotate_rows
from vispe.positions import Positions, grid_coords
from vispe.registry import ENCODINGS

#: YaRN's ramp, in rotations over the training extent: pairs above BETA_FAST extrapolate, below BETA_SLOW interpolate
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0


def axial_frequencies(head_dim: int, ndim: int, theta: float) -> torch.Tensor:
    """w_k = 1 / theta^(k / (d / (2 ndim))), k < d / (2 ndim): for 2D, 1 / theta^(4k/d)."""
    if head_dim % (2 * ndim):
        raise ValueError(
            f'rotary encodings need a head dim (embed_dim / num_heads) divisible by {2 * ndim} for {ndim}D positions '
            f'(a pair of channels per frequency and axis), got {head_dim}; change embed_dim or num_heads'
        )
    per_axis = head_dim // (2 * ndim)
    return 1.0 / theta ** (torch.arange(per_axis, dtype=torch.float32) / per_axis)


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


def ntk_factors(ranks: torch.Tensor, scale: float, axis_dims: int) -> torch.Tensor:
    """Multipliers s^(-2k / (d_a - 2)) for pairs of frequency rank k (0 = fastest): what ``ntk_theta`` does to
    w_k = 1 / theta^(2k / d_a), for frequencies that have no theta (learned ones)."""
    if axis_dims <= 2:
        return torch.ones_like(ranks, dtype=torch.float32)
    return scale ** (-2.0 * ranks.float() / (axis_dims - 2))


def yarn_factors(freqs: torch.Tensor, scale: float, train_len: float) -> torch.Tensor:
    """YaRN multipliers (1 - g_k) / s + g_k for angular frequencies ``freqs`` (any shape; their magnitude counts).

    r_k = L_train |w_k| / (2 pi) rotations over the training extent; g_k = clamp((r_k - beta_slow) /
    (beta_fast - beta_slow), 0, 1): pairs turning >= 32 times keep their frequency, <= 1 time are divided by s.
    """
    rotations = train_len * freqs.detach().abs().float() / (2 * math.pi)
    gamma = ((rotations - YARN_BETA_SLOW) / (YARN_BETA_FAST - YARN_BETA_SLOW)).clamp(0.0, 1.0)
    return (1.0 - gamma) / scale + gamma


def yarn_logit_scale(scale: float) -> float:
    """YaRN's attention temperature: logits are multiplied by 0.1 ln s + 1."""
    return 0.1 * math.log(scale) + 1.0


def frequency_ranks(magnitudes: torch.Tensor, groups: int) -> torch.Tensor:
    """Rank (0 = largest) of each of the (..., P) magnitudes within its block of P / groups consecutive pairs."""
    blocks = magnitudes.reshape(*magnitudes.shape[:-1], groups, -1)
    ranks = blocks.argsort(dim=-1, descending=True).argsort(dim=-1)
    return ranks.reshape(magnitudes.shape)


#: the property ``Encoding.strategy`` itself (mypy reads ``Encoding.strategy`` as the getter, which has no setter)
_ENCODING_STRATEGY: property = vars(Encoding)['strategy']


class RotaryStrategies(Encoding):
    """The strategy machinery shared by the rotary encodings: training grid, per-axis scales, logit scale.

    Subclasses set ``self.train_grid`` with ``train_grid_from``; without one only ``none`` may be chosen.
    """

    strategies = ('none', 'interpolate', 'ntk', 'yarn')
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

    def axis_scales(self, coords: torch.Tensor, grid: Sequence[int] | None = None) -> tuple[float, ...]:
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
        return tuple(max(1.0, r) for r in ratios)  # ntk, yarn: defined for s >= 1 (module doc)

    def scale_groups(self, pos: Positions) -> dict[tuple[float, ...], list[int]]:
        """A mixed batch (``pos.layout``): the per-axis scales of each image grid (``axis_scales`` of that grid),
        and which of ``layout.distinct_grids`` have them."""
        assert pos.layout is not None
        groups: dict[tuple[float, ...], list[int]] = {}
        for i, grid in enumerate(pos.layout.distinct_grids):
            groups.setdefault(self.axis_scales(pos.coords, grid), []).append(i)
        return groups

    def angles(
        self, coords: torch.Tensor, grid: Sequence[int] | None = None, scales: Sequence[float] | None = None
    ) -> torch.Tensor:
        """(..., N, ndim) coordinates -> (..., [H,] N, d/2) float32 angles at ``scales`` (None: those of ``grid``)."""
        raise NotImplementedError

    def rotation_table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table of ``pos`` (prefix rows (1, 0)), (..., [H,] N_total, d/2, 2): ``angles`` at the
        scales of the positions' grid, or in a mixed batch at each image's own (``image_angles``). A mixed batch on
        its own grids rotates by rows instead (``grid_angles``), never through this table."""
        return rotary_table(self.image_angles(pos), pos.num_prefix)

    def image_angles(self, pos: Positions) -> torch.Tensor:
        """``angles`` of the positions at the scales of their grid; in a mixed batch each token's at its own image's
        (one call per distinct scales, selected per token; padding takes the first)."""
        if pos.layout is None:
            return self.angles(pos.coords, scales=self.axis_scales(pos.coords, pos.grid))
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
            return self.qk_scale(self.axis_scales(pos.coords, pos.grid))
        layout = pos.layout
        per_grid = {grid: self.qk_scale(self.axis_scales(pos.coords, grid)) for grid in layout.distinct_grids}
        if len(set(per_grid.values())) == 1:
            return next(iter(per_grid.values()))
        return layout.segment_values([per_grid[g] for g in layout.grids], pos.coords.device)[:, None, :, None]

    def qk_scale(self, scales: Sequence[float]) -> float:
        """What q and k are each multiplied by after rotation: sqrt(0.1 ln s + 1) for ``yarn``, else 1."""
        if self.strategy != 'yarn' or all(s == 1.0 for s in scales):
            return 1.0
        geometric_mean = math.exp(sum(math.log(s) for s in scales) / len(scales))
        return math.sqrt(yarn_logit_scale(geometric_mean))


def train_grid_from(grid_size: Sequence[int] | None, ndim: int) -> tuple[int, ...] | None:
    """The training grid as a tuple of ndim ints (None stays None)."""
    if grid_size is None:
        return None
    grid = tuple(int(g) for g in grid_size)
    if len(grid) != ndim or min(grid) < 1:
        raise ValueError(f'grid_size must be {ndim} positive ints (one per position axis), got {tuple(grid_size)}')
    return grid


@ENCODINGS.register_module(name='rope_axial')
class RoPEAxial(RotaryStrategies):
    """Axial 2D RoPE: pair k of axis a rotates by coord_a * w_k, w_k = 1/theta^(4k/d) (theta = 100).

    No parameters; the (cos, sin) tables are cached per grid, prefix count, device and strategy. ``grid_size`` is
    the training grid (supplied by the backbone), needed by every strategy but ``none``.

    Weight decay: nothing to declare, it has no parameters.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), ``train_grid`` is a tuple of any length (no
    TorchScript type), its tables come from a ``GridTableCache`` (a Python dict with tuple keys, filled by a lambda),
    and the strategies compute Python floats.
    """

    freqs: torch.Tensor  # buffer (d_a/2,)

    def __init__(
        self, dim: int, num_heads: int, ndim: int = 2, theta: float = 100.0, grid_size: Sequence[int] | None = None
    ) -> None:
        super().__init__()
        check_positive(self.registry_name(), theta=theta)
        self.head_dim = dim // num_heads
        self.ndim = ndim
        self.theta = theta
        self.train_grid = train_grid_from(grid_size, ndim)
        self.register_buffer('freqs', axial_frequencies(self.head_dim, ndim, theta), persistent=False)
        self._cache = GridTableCache()

    @property
    def axis_dims(self) -> int:
        """d_a: rotary channels per position axis."""
        return self.head_dim // self.ndim

    def axis_frequencies(self, scales: Sequence[float]) -> list[torch.Tensor]:
        """Per axis (coordinate order), the (d_a/2,) float32 frequencies under the strategy at those scales."""
        return [self._scaled(s, a) for a, s in enumerate(scales)]

    def _scaled(self, scale: float, axis: int) -> torch.Tensor:
        if scale == 1.0:
            return self.freqs
        if self.strategy == 'interpolate':
            return self.freqs / scale
        if self.strategy == 'ntk':
            theta = ntk_theta(self.theta, scale, self.axis_dims)
            return axial_frequencies(self.head_dim, self.ndim, theta).to(self.freqs.device)
        assert self.train_grid is not None  # a scale other than 1 needs one (axis_scales)
        return self.freqs * yarn_factors(self.freqs, scale, self.train_grid[axis])  # yarn

    def angles(
        self, coords: torch.Tensor, grid: Sequence[int] | None = None, scales: Sequence[float] | None = None
    ) -> torch.Tensor:
        """(..., N, ndim) -> (..., N, d/2) float32, with the strategy applied at ``scales`` (None: those of
        ``grid``, the token grid; without it the coordinates' extent). The last axis comes first (x before y for
        (row, col))."""
        freqs = self.axis_frequencies(self.axis_scales(coords, grid) if scales is None else scales)
        # the buffers follow the module; a table asked for on another device (positions there) gets them moved
        per_axis = [coords[..., a, None].float() * freqs[a].to(coords.device) for a in reversed(range(self.ndim))]
        return torch.cat(per_axis, dim=-1)

    def table(self, pos: Positions) -> torch.Tensor:
        """The (cos, sin) table (1, num_prefix + N, d/2, 2), or (B, 1, num_prefix + N, d/2, 2) for per-sample
        positions: a head axis in front of the tokens either way (shared by the heads), without a branch on the
        table's rank, which an FX trace cannot take."""
        key = pos.cache_key(self.strategy)  # the strategy may change between evaluations of one model
        table = self._cache.get(key, lambda: self.rotation_table(pos))
        return table.unsqueeze(-4)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        scale = self.qk_scales(pos)
        if pos.layout is not None and pos.key is not None:  # a mixed batch on its grids: rows per grid cell
            rows, index = self._cache.get(pos.cache_key(self.strategy, 'rows'), lambda: self.grid_rows(pos))
            return rotate_rows(q, k, rows, index, scale)
        return rotate_qk(q, k, self.table(pos), scale)

    def grid_rows(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch's (cos, sin) rows (R, 1, d/2, 2) per distinct grid cell and each token's row (B, T)."""
        rows, index = self.grid_angles(pos)
        return rotary_table(rows.unsqueeze(1)), index


@ENCODINGS.register_module(name='rope_mixed')
class RoPEMixed(RotaryStrategies):
    """Mixed 2D RoPE with learnable frequencies, one set per attention layer and head.

    The angle of pair j in head h is f_x[h, j] * col + f_y[h, j] * row. Init (theta = 10): magnitudes
    1/theta^(4k/d); a random angle a per head; the first d/4 pairs point along (cos a, sin a), the last d/4
    along a + pi/2.

    Weight decay: none on ``freqs`` (ndim, H, d/2), as in the RoPE-ViT reference code (its ``no_weight_decay``
    names ``freqs``): decay would pull every frequency toward 0, i.e. toward no rotation and no position.

    Strategies act on each axis' component of the frequencies (f_x with the column scale, f_y with the row
    scale). Learned frequencies have no theta, so ``ntk`` applies its equivalent per-pair factor
    s^(-2k / (d_a - 2)), k the rank of |f_j| within its block of d/4 pairs (the blocks are the two axis groups of
    the init; rank 0 = largest magnitude, kept); ``yarn`` counts the rotations of pair j with |f_j|.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    Cost: the (H, N, d/2) angles once per forward pass and layer (learned, so never cached), shared by the batch;
    then the fused rotary kernel, whose backward also sums the table's gradient. CPU: 1.02x ape_learned (ViT-S/16
    224, batch 8, float32; README). GPU: not yet measured with the kernel (1.59x before it, and Inductor failed on
    its complex rotation, which compiled graphs no longer contain).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), ``train_grid`` is a tuple of any length (no
    TorchScript type), and the strategies compute Python float scales with generator expressions.
    """

    no_weight_decay_params = ('freqs',)

    def __init__(
        self, dim: int, num_heads: int, ndim: int = 2, theta: float = 10.0, grid_size: Sequence[int] | None = None
    ) -> None:
        super().__init__()
        if ndim != 2:
            raise ValueError(f'rope_mixed is defined here for 2D positions, got ndim={ndim}')
        check_positive('rope_mixed', theta=theta)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.theta = theta
        self.train_grid = train_grid_from(grid_size, ndim)
        axial_frequencies(self.head_dim, ndim, theta)  # validates the head dim
        self.freqs = nn.Parameter(torch.empty(2, num_heads, self.head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.freqs.copy_(init_random_2d_freqs(self.head_dim, 1, self.num_heads, temperature=self.theta)[:, 0])

    def frequency_factors(self, scales: Sequence[float]) -> torch.Tensor | None:
        """(2, H, d/2) float32 multipliers of (f_x, f_y) under the strategy at (row, col) scales; None: all 1."""
        if all(s == 1.0 for s in scales):
            return None
        by_freq_axis = (scales[1], scales[0])  # freqs[0] multiplies the column, freqs[1] the row
        magnitudes = self.freqs.detach().float().norm(dim=0)  # (H, d/2); the strategy is no function to train
        axis_dims = self.head_dim // 2
        factors = []
        for a, s in enumerate(by_freq_axis):
            if self.strategy == 'interpolate':
                factors.append(torch.full_like(magnitudes, 1.0 / s))
            elif self.strategy == 'ntk':
                factors.append(ntk_factors(frequency_ranks(magnitudes, 2), s, axis_dims))
            else:  # yarn, with the training extent of the axis this component multiplies
                assert self.train_grid is not None  # a scale other than 1 needs one (axis_scales)
                factors.append(yarn_factors(magnitudes, s, self.train_grid[1 - a]))
        return torch.stack(factors)

    def angles(
        self, coords: torch.Tensor, grid: Sequence[int] | None = None, scales: Sequence[float] | None = None
    ) -> torch.Tensor:
        """(..., N, 2) (row, col) -> (..., H, N, d/2) at ``scales`` (None: those of ``grid``); float32 and
        matmul-free so autocast cannot downcast it."""
        freqs = self.freqs.float()
        factors = self.frequency_factors(self.axis_scales(coords, grid) if scales is None else scales)
        if factors is not None:
            freqs = freqs * factors
        col, row = coords[..., 1].float(), coords[..., 0].float()
        return col[..., None, :, None] * freqs[0, :, None] + row[..., None, :, None] * freqs[1, :, None]

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        scale = self.qk_scales(pos)
        if pos.layout is not None and pos.key is not None:  # a mixed batch on its grids: rows per grid cell
            rows, index = self.grid_angles(pos)  # (R, H, d/2), (B, T)
            return rotate_by_rows(q, k, rows, index, scale)
        table = self.rotation_table(pos)  # (..., H, N, d/2, 2)
        return rotate_qk(q, k, table, scale)


__all__ = [
    'RoPEAxial',
    'RoPEMixed',
    'RotaryStrategies',
    'axial_frequencies',
    'ntk_factors',
    'ntk_theta',
    'rotary_table',
    'rotate_by_rows',
    'rotate_pairs',
    'rotate_qk',
    'yarn_factors',
    'yarn_logit_scale',
]
