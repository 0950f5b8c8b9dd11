"""Parity of ``lff`` with its paper: Li et al., "Learnable Fourier Features for Multi-Dimensional Spatial Positional
Encoding" (NeurIPS 2021), Algorithm 1, computed here densely in float64.

No reference code: the authors (Google) released none that could be found. The paper and its NeurIPS proceedings
page link no repository; a search of public code for the title and for "learnable Fourier features" positional
encodings finds only third-party ports (e.g. willGuimont/learnable_fourier_positional_encoding,
JHLew/Learnable-Fourier-Features), which are no authority on the method. So the test computes the paper's equations
from vispe's weights:

    r_x = 1 / sqrt(|F|) [cos(x W_r^T) || sin(x W_r^T)],   W_r in R^(|F|/2 x M), W_r ~ N(0, gamma^-2)
    PE_x = GeLU(r_x W_1 + B_1) W_2 + B_2

with one positional group (G = 1: the whole (row, col) or (x, y, z) position), x the position as given.
"""

from __future__ import annotations

import math

import torch

from vispe import build_encoding
from vispe.positions import Positions, grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('lff',)


def paper(enc: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of the paper on positions x (N, M), in float64, with ``enc``'s W_r, W_1, B_1, W_2, B_2."""
    x = x.double()
    w_r = enc.freqs.weight.detach().double()  # (|F|/2, M)
    first, second = enc.mlp[0], enc.mlp[2]
    angles = x @ w_r.T
    r = torch.cat([angles.cos(), angles.sin()], dim=-1) / math.sqrt(2 * w_r.shape[0])
    h = r @ first.weight.detach().double().T + first.bias.detach().double()
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # GeLU, exact
    return h @ second.weight.detach().double().T + second.bias.detach().double()


def added(enc: torch.nn.Module, pos: Positions, dim: int) -> torch.Tensor:
    """What ``embed`` adds to the non-prefix tokens: (N, dim) or (B, N, dim)."""
    shape = (*pos.coords.shape[:-1], dim) if pos.coords.dim() == 3 else (1, pos.coords.shape[0], dim)
    out = enc.embed(torch.zeros(shape, dtype=torch.float64), pos)
    return out[0] if pos.coords.dim() == 2 else out


def test_grid_tokens_match_the_paper() -> None:
    """A 5 x 7 token grid, positions in token units (vispe's default for grids, Algorithm 1's positions as given),
    |F| = 16, H = 32, D = 12, gamma = 10 and gamma = 2 (fast frequencies): vispe adds the paper's PE_x, up to its
    float32 Fourier features."""
    torch.manual_seed(0)
    pos = grid_positions(5, 7)
    for gamma in (10.0, 2.0):
        enc = build_encoding({'type': 'lff', 'num_features': 16, 'gamma': gamma}, dim=12, ndim=2).double()
        torch.testing.assert_close(added(enc, pos, 12), paper(enc, pos.coords), atol=1e-6, rtol=1e-5)


def test_points_match_the_paper_with_normalize_false() -> None:
    """Point clouds (no grid), (x, y, z): with ``normalize=False`` the paper's PE_x of the positions as given; vispe's
    default min-max normalises each cloud first (a departure the docstring states), which gives other values."""
    torch.manual_seed(0)
    coords = torch.randn(2, 9, 3, dtype=torch.float64) * 3
    pos = Positions(coords=coords, num_prefix=0)
    enc = build_encoding({'type': 'lff', 'num_features': 16, 'normalize': False, 'gamma': 2.0}, dim=12, ndim=3)
    enc = enc.double()
    torch.testing.assert_close(added(enc, pos, 12), paper(enc, coords), atol=1e-6, rtol=1e-5)
    default = build_encoding({'type': 'lff', 'num_features': 16, 'gamma': 2.0}, dim=12, ndim=3).double()
    default.load_state_dict(enc.state_dict(), strict=False)
    assert default.normalize is None
    assert (added(default, pos, 12) - paper(default, coords)).abs().max() > 1e-3


def test_frequency_init_has_the_papers_spread() -> None:
    """W_r ~ N(0, gamma^-2): over 4096 draws (|F| = 4096: 2048 rows of M = 2) the sample std is 1/gamma within 3%
    and the mean is within 3 standard errors of 0."""
    torch.manual_seed(0)
    for gamma in (10.0, 1.0):
        enc = build_encoding({'type': 'lff', 'num_features': 4096, 'gamma': gamma}, dim=8, ndim=2)
        w = enc.freqs.weight.detach().double().flatten()
        assert abs(w.std().item() * gamma - 1) < 0.03
        assert abs(w.mean().item()) * gamma < 3 / math.sqrt(w.numel())
