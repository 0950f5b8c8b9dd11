"""Learnable Fourier features (Li et al., "Learnable Fourier Features for Multi-Dimensional Spatial Positional
Encoding", NeurIPS 2021).

For a position p in R^M: r = (1/sqrt(F)) [cos(p W_r^T), sin(p W_r^T)] with a learned W_r in R^(F/2 x M), init
N(0, gamma^-2), then an MLP (Linear - GELU - Linear) to the model width, added to the tokens (the paper's Algorithm
1, which feeds the positions themselves, with no normalisation step). Hook: embed, x (B, N, D) -> (B, N, D).

Units. Grid tokens default to token-grid units, (row, col) as the backbone gives them: with gamma = 10 the
frequencies have std 0.1 per token, and the features of two tokens Delta apart have expected cosine similarity
exp(-|Delta|^2 / (2 gamma^2)) (the Gaussian kernel that random Fourier features approximate): 0.18 between opposite
corners of a 14 x 14 grid, so the encoding tells the tokens apart at init. Positions normalised to [0, 1]
(``normalize=True``) give exp(-1.72 / 200) = 0.991 there instead: nearly one feature vector for the whole grid
(the same kernel on [0, 1] needs gamma = 10 / the grid's size, 0.71 for 14). In token-grid units a larger grid
extrapolates (positions past the training grid); normalised ones interpolate (a larger grid samples the same
function more densely). Point clouds (no grid) default to per-cloud min-max normalisation, as before: metres have
no common scale across datasets.
"""

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
    """(N, M) or (B, N, M) float32 positions in [0, 1].

    Grid tokens: (coord + 0.5) / size per axis, with size = ``pos.span`` (the grid, or rpe2d's enlarged range;
    token centres: the same normalised point in two grids gets the same value). Points (``pos.grid`` None):
    min-max over the tokens of each sample, per axis: (p - min) / max(max - min, POINT_EPS).
    """
    coords = pos.coords.float()
    if pos.on_grid:  # one grid, or each token's own image grid in a mixed batch (``span_tensor``)
        size = pos.span_tensor()
        return (coords + 0.5) / size
    lo = coords.amin(dim=-2, keepdim=True)
    hi = coords.amax(dim=-2, keepdim=True)
    return (coords - lo) / (hi - lo).clamp_min(POINT_EPS)


@ENCODINGS.register_module(name='lff')
class LFF(LayerAdaptive):
    """Learnable Fourier features + MLP, added to the patch tokens (prefix tokens carry no position).

    Args:
        dim: model width D.
        ndim: position dimensions M (2 for images, 3 for points).
        num_features: F, even, >= 2 (None: F = D).
        hidden_dim: MLP width (32 in the paper).
        gamma: > 0; W_r init std is 1 / gamma, per unit of position (10: Algorithm 1's hyperparameter, here per token).
        normalize: whether positions go through ``normalize_positions`` first. None: grid tokens stay in token-grid
            units, point clouds are min-max normalised per cloud and axis. True: grids too are normalised, (coord + 0.5)
            / size, into [0, 1] (resolution-independent; then pick gamma near 10 / the training grid's size, since with
            gamma = 10 the features barely vary over [0, 1]). False: points too stay in the data's unit.
        lape: LaPE: the MLP's output enters each block's attention input through a LayerNorm of its own per block,
            instead of being added to the tokens once.
        depth: the number of blocks, one LayerNorm each with ``lape`` (the backbone supplies it).
        lape_progressive: with ``lape``, block l's LayerNorm reads block l-1's normalised table, as the authors' code
            (``LayerAdaptive``).

    The Fourier features are computed in float32 even under autocast; the MLP follows
    autocast. Shared positions (N, M) give one (N, D) table broadcast over the batch.

    Weight decay: none on the Fourier matrix W_r (``freqs.weight``): it holds the learned frequencies, and decay
    would pull them toward 0, i.e. every feature toward a constant and the encoding toward none. The MLP's weights
    are ordinary linear weights and are decayed.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.

    LaPE (``lape=True``, ``vispe.encodings.lape.LayerAdaptive``): the MLP's output enters each block's attention
    input through a LayerNorm of its own per block, instead of the tokens; the features and the MLP then run once
    per block (cost: depth times the MLP on (N, F), still small against a block).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), and its positions come from a ``GridTableCache`` (a
    Python dict with tuple keys, filled by a lambda).
    """

    ndims = (2, 3)
    needs_grid = False  # reads coordinates alone: points as well as grids
    no_weight_decay_params = ('freqs.weight',)
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
        """Before a state is loaded (``vispe.engine.checkpoint.upgrade_state``): refuse one trained with another
        position unit, which would load key for key and give other numbers. A state without ``position_unit`` was
        saved before grid positions defaulted to token-grid units: it normalised every position to [0, 1], which
        is ``normalize=True`` (and, for points, the default too)."""
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
        """(N, M) or (B, N, M) float32 positions in the unit the features see (see ``normalize``)."""
        normalize = not pos.on_grid if self.normalize is None else self.normalize
        return normalize_positions(pos) if normalize else pos.coords.float()

    def features(self, p: torch.Tensor) -> torch.Tensor:
        """Positions (..., N, M) (``positions``) -> Fourier features (..., N, F), float32."""
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
