"""ViTAR's fuzzy positional encoding (Fan et al. 2024, "ViTAR: Vision Transformer with Any Resolution"):
``ape_learned`` with the ``grid_sample`` strategy, against the paper's equations computed here, dense, in float64.

No reference code: the authors released none. Searched: GitHub code and issues for ViTAR, "Vision Transformer with
Any Resolution", "fuzzy positional encoding", ``FuzzyPositionalEncoding`` and the authors' names; what exists is
third-party re-implementations, none the authors'. So there is no recorder, and the test computes the paper's
definition: in training, token (i, j) reads the learned table at (i + s_1, j + s_2), s ~ U[-1/2, 1/2] per token and
axis, by bilinear interpolation of the table's entries (grid_sample); at inference it reads the exact (i, j).
Bilinear interpolation is written as the sum over every entry (r, c) of the table of
max(0, 1 - |u - r|) max(0, 1 - |v - c|) T[r, c], independent of vispe's four gathers.

Where the paper is silent, vispe's documented choices are tested as such: points beyond the table's outer entries
are clamped to its border (a jittered edge token reads the edge entry), and a grid other than the table's is read at
matched cell centres, u = (p + 1/2) G / g - 1/2 (ViTAR's token merger always brings the tokens to the table's grid)."""

from __future__ import annotations

import torch

from vispe import build_encoding
from vispe.positions import FuzzyPositions, grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('strategy:grid_sample',)

GRID, DIM = (4, 5), 8


def paper_lookup(table: torch.Tensor, grid: tuple[int, int], u: torch.Tensor) -> torch.Tensor:
    """The (1, h*w, D) row-major table read at (..., N, 2) points (row, col) by bilinear interpolation, dense."""
    h, w = grid
    rows = torch.arange(h, dtype=torch.float64)
    cols = torch.arange(w, dtype=torch.float64)
    r = u[..., 0].double().clamp(0, h - 1)[..., None]  # clamped to the border (vispe's choice: the paper is silent)
    c = u[..., 1].double().clamp(0, w - 1)[..., None]
    wr = (1 - (r - rows).abs()).clamp(min=0)  # (..., N, h)
    wc = (1 - (c - cols).abs()).clamp(min=0)  # (..., N, w)
    weights = (wr[..., :, None] * wc[..., None, :]).flatten(-2)  # (..., N, h*w)
    return weights @ table[0].double()


def ape_grid_sample() -> torch.nn.Module:
    enc = build_encoding({'type': 'ape_learned', 'strategy': 'grid_sample'}, dim=DIM, grid_size=GRID).double()
    with torch.no_grad():
        enc.pos_embed.normal_(generator=torch.Generator().manual_seed(0))
    return enc


def test_fuzzy_positions_read_the_table_bilinearly_at_the_jittered_points() -> None:
    """Training: each token at (i + s_1, j + s_2), s uniform in [-1/2, 1/2), per token and sample."""
    enc = ape_grid_sample()
    pos = FuzzyPositions(0.5)(grid_positions(*GRID), batch_size=3, generator=torch.Generator().manual_seed(1))
    offsets = pos.coords - grid_positions(*GRID).coords
    assert offsets.abs().max() <= 0.5 and offsets.abs().max() > 0.4  # the draw spans the cell
    ours = enc.position_table(pos, torch.float64)
    paper = paper_lookup(enc.pos_embed.detach(), GRID, pos.coords)
    torch.testing.assert_close(ours, paper, atol=1e-6, rtol=1e-6)  # vispe's interpolation weights are float32
    inside = ((pos.coords >= 0) & (pos.coords <= torch.tensor(GRID) - 1)).all(-1)
    assert inside.any() and (~inside).any()  # both interior points and clamped edge points were compared


def test_exact_positions_read_the_entries_themselves() -> None:
    """Inference: the exact (i, j) of the table's grid read its entries, to the bit."""
    enc = ape_grid_sample()
    ours = enc.position_table(grid_positions(*GRID), torch.float64)
    torch.testing.assert_close(ours, enc.pos_embed.detach(), atol=0, rtol=0)
    plain = grid_positions(*GRID)
    unkeyed = type(plain)(plain.coords, grid=plain.grid)  # without a cache key: through the lookup itself
    torch.testing.assert_close(enc.position_table(unkeyed, torch.float64), enc.pos_embed.detach(), atol=1e-12, rtol=0)


def test_another_grid_reads_the_table_at_matched_cell_centres() -> None:
    """vispe's reading at a 6 x 7 grid (no part of the paper): u = (p + 1/2) G / g - 1/2 per axis."""
    enc = ape_grid_sample()
    grid = (6, 7)
    pos = grid_positions(*grid)
    u = (pos.coords.double() + 0.5) * torch.tensor(GRID, dtype=torch.float64) / torch.tensor(grid) - 0.5
    ours = enc.position_table(pos, torch.float64)
    torch.testing.assert_close(ours, paper_lookup(enc.pos_embed.detach(), GRID, u)[None], atol=1e-6, rtol=1e-6)
