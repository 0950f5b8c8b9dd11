"""Learnable Fourier features (Li et al., NeurIPS 2021, Algorithm 1): r = (1/sqrt(F)) [cos(p W_r^T), sin(p W_r^T)],
W_r (F/2 x M) learned from N(0, gamma^-2), then Linear - GELU - Linear, added to the tokens. Grid positions are in
token-grid units (``normalize=True``: [0, 1], with gamma near 10 / the grid's size). Departure: point clouds are
min-max normalised per cloud, the paper's are not (``normalize=False``)."""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from vispe.encodings.base import GridTableCache, check_positive
from vispe.encodings.lape import LayerAdaptive
from vispe.positions import Positions, autocast_off, is_symbolic
from vispe.registry import ENCODINGS

#: ``LFF(normalize=...)`` as the buffer ``position_unit`` stores it
UNIT_CODES: dict[bool | None, int] = {None: -1, False: 0, True: 1}
#: floor on an axis' extent when min-max normalising points, so a flat axis (all equal) maps to 0, not NaN
POINT_EPS = 1e-6


def normalize_positions(pos: Positions) -> torch.Tensor:
    """Float32 positions in [0, 1]: grid tokens (coord + 0.5) / ``pos.span``; points min-max per sample and axis."""
    coords = pos.coords.float()
    if pos.on_grid:  # one grid, or each token's own image grid in a mixed batch (``span_tensor``)
        size = pos.span_tensor()
        return (coords + 0.5) / size
    lo = coords.amin(dim=-2, keepdim=True)
    hi = coords.amax(dim=-2, keepdim=True)
    return (coords - lo) / (hi - lo).clamp_min(POINT_EPS)


@ENCODINGS.register_module(name='lff')
class LFF(LayerAdaptive):
    """Learnable Fourier features + MLP on the patch tokens; features in float32.

    Args:
        dim: model width.
        ndim: position dimensions M.
        num_features: F, even (None: F = dim).
        hidden_dim: MLP width (32 in the paper).
        gamma: W_r's init std is 1 / gamma per unit of position.
        normalize: positions through ``normalize_positions`` first; None: points only.
        lape: LaPE (``LayerAdaptive``).
        depth: the number of blocks (LaPE's norms).
        lape_progressive: LaPE's chained norms (``LayerAdaptive``).
    """

    ndims = (2, 3)
    needs_grid = False  # reads coordinates alone: points as well as grids
    no_weight_decay_params = ('freqs.weight',)
    weight_decay_note = 'the learned frequencies; decay would flatten the features'
    #: persistent buffer (): the ``normalize`` this state was trained with (``UNIT_CODES``), checked on loading
    position_unit: torch.Tensor

    def __init__(
        self,
        dim: int,
        ndim: int = 2,
        num_features: int | None = None,
        hidden_dim: int = 32,
        gamma: float = 10.0,
        normalize: bool | None = None,
        lape: bool = False,
        depth: int | None = None,
        lape_progressive: bool = False,
    ) -> None:
        super().__init__()
        num_features = dim if num_features is None else num_features
        if num_features < 2 or num_features % 2:
            raise ValueError(f'lff needs an even num_features >= 2 (cos and sin halves), got {num_features}')
        if gamma <= 0:
            raise ValueError(f'lff needs gamma > 0 (W_r init std is 1/gamma), got {gamma}')
        check_positive('lff', hidden_dim=hidden_dim)
        self.ndim = ndim
        self.num_features = num_features
        self.gamma = gamma
        self.normalize = None if normalize is None else bool(normalize)
        self.freqs = nn.Linear(ndim, num_features // 2, bias=False)  # W_r (F/2, M)
        self.register_buffer('position_unit', torch.tensor(UNIT_CODES[self.normalize]))
        self.mlp = nn.Sequential(nn.Linear(num_features, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
        self._cache = GridTableCache()
        self.init_lape(lape, dim, depth, lape_progressive)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.freqs.weight, std=1.0 / self.gamma)

    def upgrade_state(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        """Refuse a state trained with another ``normalize`` (one without ``position_unit`` had ``normalize=True``)."""
        key = prefix + 'position_unit'
        if prefix + 'freqs.weight' not in state:
            return  # not this encoding's state (another model's file): the key comparison reports it
        saved = state.get(key)
        if saved is None:
            if self.normalize is True or (self.normalize is None and self.ndim != 2):
                state[key] = self.position_unit.detach().clone()
                return
            raise ValueError(
                f'{prefix}lff was trained on positions normalised to [0, 1] (saved before lff defaulted to token-grid '
                "units); build it with encoding=dict(type='lff', normalize=True) to load it "
                '(--cfg-options model.backbone.encoding.normalize=True)'
            )
        if int(saved) != int(self.position_unit):
            trained = next(k for k, v in UNIT_CODES.items() if v == int(saved))
            raise ValueError(
                f'{prefix}lff was trained with normalize={trained} but is built with normalize={self.normalize}; build '
                f"it with encoding=dict(type='lff', normalize={trained}) to load it"
            )

    def positions(self, pos: Positions) -> torch.Tensor:
        """(N, M) or (B, N, M) float32 positions in the unit the features see."""
        normalize = not pos.on_grid if self.normalize is None else self.normalize
        return normalize_positions(pos) if normalize else pos.coords.float()

    def features(self, p: torch.Tensor) -> torch.Tensor:
        """Positions (..., N, M) -> Fourier features (..., N, F), float32."""
        with autocast_off(p):  # bf16 angles would lose the fine frequencies
            angles = p.float() @ self.freqs.weight.float().t()
            return torch.cat([angles.cos(), angles.sin()], dim=-1) * (1.0 / math.sqrt(self.num_features))

    def position_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        if not is_symbolic(pos.ndim) and pos.ndim != self.ndim:  # a traced (FX) model has no ndim to compare
            raise ValueError(
                f'lff was built for {self.ndim}D positions but got {pos.ndim}D; build it with ndim={pos.ndim}'
            )
        p = self._cache.get(pos.cache_key(), lambda: self.positions(pos))
        features = self.features(p)  # float32 under autocast; cast to the MLP's dtype for a model cast to bf16
        return self.mlp(features.to(cast(nn.Linear, self.mlp[0]).weight.dtype)).to(dtype)

    def extra_repr(self) -> str:
        return f'num_features={self.num_features}, gamma={self.gamma}, normalize={self.normalize}, lape={self.lape}'


__all__ = ['LFF', 'normalize_positions']
