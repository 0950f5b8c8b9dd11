"""DINOv3's rotary position embedding (Simeoni et al., 2025; timm's ``RotaryEmbeddingDinoV3``): axial RoPE on
coordinates normalised per image, c = 2 (p + 1/2) / L - 1 in (-1, 1) for token p of L, with a training-time
augmentation c -> (c + s) f_a r (shift, per-axis jitter, shared rescale; one draw per forward pass shared by the
layers, in DINOv3's order from torch's global generator). Pair j of an axis turns by 2 pi c / P_j, P_j = base^(4j / d)
or geometric between ``min_period`` and ``max_period``; the row's pairs first. DINOv3 pairs channel j with j + d/2, so
its weights load through a fixed permutation of q's and k's channels (``vispe.backbones.timm_interop.eva``).
Strategies: ``none`` (DINOv3's own: every grid spans (-1, 1)) and ``extend`` (normalised by the training grid).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from vispe.encodings.base import GridTableCache, check_positive
from vispe.encodings.rotary import TrainGridStrategies, axial_frequencies, train_grid_from
from vispe.kernels.rotary import rotary_table, rotate_qk
from vispe.positions import Positions, sizes_tensor
from vispe.registry import ENCODINGS

NORMALIZE = ('separate', 'min', 'max')


@torch.fx.wrap
def coordinate_augmentation(
    shift: float | None, jitter: float | None, rescale: float | None, device: torch.device
) -> torch.Tensor:
    """One draw of DINOv3's coordinate augmentation, (2, 2) float32: row 0 the shift of (row, col), row 1 their
    factors (jitter times rescale). Drawn in DINOv3's order (shift, jitter, rescale) from the global generator. An FX
    leaf: a traced training graph draws anew at each call instead of keeping the draw it was traced with."""
    shifts = torch.zeros(2, device=device)
    factors = torch.ones(2, device=device)
    if shift is not None:
        shifts = torch.empty(2, device=device).uniform_(-shift, shift)
    if jitter is not None:
        bound = math.log(jitter)
        factors = factors * torch.empty(2, device=device).uniform_(-bound, bound).exp()
    if rescale is not None:
        bound = math.log(rescale)
        factors = factors * torch.empty(1, device=device).uniform_(-bound, bound).exp()
    return torch.stack([shifts, factors])


def dinov3_periods(
    head_dim: int, base: float | None = 100.0, min_period: float | None = None, max_period: float | None = None
) -> torch.Tensor:
    """(d/4,) float32 periods P_j: base^(4j / d), or geometric from ``min_period`` to ``max_period`` when both are
    given (they then take precedence, as in DINOv3)."""
    per_axis = head_dim // 4
    if min_period is not None and max_period is not None:
        return min_period * (max_period / min_period) ** torch.linspace(0, 1, per_axis, dtype=torch.float32)
    if base is None:
        raise ValueError('rope_dinov3 needs base, or both min_period and max_period')
    return 1.0 / axial_frequencies(head_dim, 2, base)  # base^(4j / d)


@ENCODINGS.register_module(name='rope_dinov3')
class RoPEDinoV3(TrainGridStrategies):
    """DINOv3's RoPE (module doc). Trace (FX, torch.export) in eval mode: a graph traced in training draws the
    augmentation at every step.

    Args:
        dim: the attention's width (head dim divisible by 4).
        num_heads: the attention's heads.
        ndim: position axes; only 2.
        base: the period ladder's base, > 0; None needs ``min_period`` and ``max_period``.
        min_period: shortest period of a geometric ladder (with ``max_period``, replaces ``base``).
        max_period: longest period of that ladder.
        normalize: 'separate' (each axis by its own length), 'min' or 'max' (both by the shorter / longer one).
        shift: bound >= 0 of the per-axis shift; None: off.
        jitter: factor >= 1 of the per-axis scale; None: off.
        rescale: factor >= 1 of the scale shared by the axes; None: off.
        grid_size: the training grid, needed by ``extend``.
    """

    strategies = ('none', 'extend')
    train_grid_use = 'normalises by the training grid'
    periods: torch.Tensor  # buffer (d/4,)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        base: float | None = 100.0,
        min_period: float | None = None,
        max_period: float | None = None,
        normalize: str = 'separate',
        shift: float | None = None,
        jitter: float | None = None,
        rescale: float | None = 2.0,
        grid_size: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        if ndim != 2:
            raise ValueError(f'rope_dinov3 encodes 2D image grids, got ndim={ndim}')
        if normalize not in NORMALIZE:
            raise ValueError(f'rope_dinov3: normalize must be one of {list(NORMALIZE)}, got {normalize!r}')
        if (min_period is None) != (max_period is None):
            raise ValueError('rope_dinov3: give both min_period and max_period (a geometric ladder), or neither')
        check_positive('rope_dinov3', base=base, min_period=min_period, max_period=max_period)
        if shift is not None and not (math.isfinite(shift) and shift >= 0):
            raise ValueError(f'rope_dinov3: shift is a bound >= 0 on the normalised coordinates, got {shift}')
        for name, factor in (('jitter', jitter), ('rescale', rescale)):
            if factor is not None and not (math.isfinite(factor) and factor >= 1):
                raise ValueError(
                    f'rope_dinov3: {name} is a factor >= 1 (log-uniform in [1/{name}, {name}]), got {factor}'
                )
        self.head_dim = dim // num_heads
        self.base, self.min_period, self.max_period = base, min_period, max_period
        self.normalize = normalize
        self.shift, self.jitter, self.rescale = shift, jitter, rescale
        self.train_grid = train_grid_from(grid_size, 2)
        axial_frequencies(self.head_dim, 2, 1.0)  # validates the head dim (divisible by 4)
        periods = dinov3_periods(self.head_dim, base, min_period, max_period)
        self.register_buffer('periods', periods, persistent=False)
        self._cache = GridTableCache()

    @property
    def augmented(self) -> bool:
        """Whether training draws an augmentation (any of shift, jitter, rescale set)."""
        return self.shift is not None or self.jitter is not None or self.rescale is not None

    def extra_repr(self) -> str:
        return (
            f'head_dim={self.head_dim}, normalize={self.normalize!r}, shift={self.shift}, jitter={self.jitter}, '
            f'rescale={self.rescale}, strategy={self.strategy!r}'
        )

    def normalisers(self, pos: Positions) -> torch.Tensor:
        """L per axis, (2,) float32, or per token (B, T, 2) in a mixed batch: the grid (the range drawn from for
        sampled positions, the range the coordinates span for tokens off one grid, the training grid under
        ``extend``), then its min or max for ``normalize`` 'min' / 'max'."""
        if self.strategy == 'extend':
            assert self.train_grid is not None  # the setter refuses 'extend' without one
            span = sizes_tensor(list(self.train_grid), pos.coords.device)
        elif pos.span is not None or pos.layout is not None:
            span = pos.span_tensor()
        else:  # tokens off one grid (a multi-view batch: each view's grid): the range the coordinates span
            flat = pos.coords.detach().float().reshape(-1, 2)
            span = flat.amax(0) - flat.amin(0) + 1.0
        if self.normalize == 'min':
            span = span.amin(-1, keepdim=True).expand(span.shape)
        elif self.normalize == 'max':
            span = span.amax(-1, keepdim=True).expand(span.shape)
        return span.clamp(min=1.0)  # a mixed batch's padding has no grid; its angles are zeroed below

    def coordinates(self, pos: Positions, draw: torch.Tensor | None = None) -> torch.Tensor:
        """The normalised (row, col) coordinates (..., N, 2) float32, augmented by ``draw`` (2, 2) when given."""
        coords = 2.0 * (pos.coords.float() + 0.5) / self.normalisers(pos) - 1.0
        if draw is not None:
            coords = (coords + draw[0]) * draw[1]
        return coords

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """Normalised (..., N, 2) coordinates -> (..., N, d/2) angles, the row's d/4 pairs first."""
        omega = 2.0 * math.pi / self.periods
        return torch.cat([coords[..., 0, None] * omega, coords[..., 1, None] * omega], dim=-1)

    def table(self, pos: Positions, draw: torch.Tensor | None = None) -> torch.Tensor:
        """The (cos, sin) table (num_prefix + N, d/2, 2), or (B, num_prefix + N, d/2, 2) for per-sample positions; a
        mixed batch's prefix and padding rows are (1, 0) (no rotation)."""
        angles = self.angles(self.coordinates(pos, draw))
        if pos.layout is not None:
            angles = angles * pos.layout.patch_mask(pos.coords.device)[..., None]
        return rotary_table(angles, pos.num_prefix)

    def draw(self, pos: Positions) -> torch.Tensor | None:
        """This forward pass's augmentation (2, 2), drawn by the first layer and read by the others; None at
        evaluation or with the augmentation off."""
        if not (self.training and self.augmented):
            return None
        name = f'rope_dinov3 {self.shift} {self.jitter} {self.rescale}'
        drawn = pos.draws.get(name)
        if drawn is None:
            drawn = pos.draws[name] = coordinate_augmentation(self.shift, self.jitter, self.rescale, pos.coords.device)
        return drawn

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        drawn = self.draw(pos)
        if drawn is None:
            table = self._cache.get(pos.cache_key(self.strategy), lambda: self.table(pos))
        else:  # one table per forward pass, shared by the layers like the draw it comes from (Positions.tables)
            name = (
                f'rope_dinov3 table {self.head_dim} {self.base} {self.min_period} {self.max_period} {self.normalize} '
                f'{self.strategy} {self.shift} {self.jitter} {self.rescale}'
            )
            shared = pos.tables.get(name)
            if shared is None:
                shared = pos.tables[name] = self.table(pos, drawn)
            table = shared
        return rotate_qk(q, k, table.unsqueeze(-4))  # a head axis in front of the tokens, shared by the heads


__all__ = ['NORMALIZE', 'RoPEDinoV3', 'coordinate_augmentation', 'dinov3_periods']
