"""Parity with MAE (facebookresearch/mae; recorders: tools/parity/record_ape_sincos.py, record_ape_learned_mae.py):
the fixed 2D sin-cos table of ``ape_sincos`` (``get_2d_sincos_pos_embed``), and ``ape_learned``'s bicubic resizing
with ``antialias=False`` (``interpolate_pos_embed``, DeiT's)."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>' (ape_learned and its bicubic
#: strategy are claimed by test_parity_timm.py; MAE's resizing is its antialias=False form, tested here as well)
METHODS = ('ape_sincos',)


def sincos_added(dim: int, h: int, w: int) -> torch.Tensor:
    """What vispe's ape_sincos adds to the h x w patch tokens of a float64 model: (1, h*w, dim)."""
    enc = build_encoding('ape_sincos', dim=dim, ndim=2)
    x = torch.zeros(1, h * w, dim, dtype=torch.float64)
    return enc.embed(x, grid_positions(h, w))


def test_sincos_table_matches_mae() -> None:
    """MAE's ``get_2d_sincos_pos_embed(16, 5, cls_token=True)``: the table vispe adds to the 5 x 5 patch tokens is
    MAE's patch rows (first half of the channels the column, second the row, each [sin, cos]), up to vispe's
    float32 angles (MAE's are float64); MAE's cls row is zero, which is what vispe gives a prefix token (nothing)."""
    record = recorded('ape_sincos')
    dim, side = record['dim'], record['side']
    square = record['square']
    assert torch.equal(square[0], torch.zeros(dim, dtype=torch.float64))
    torch.testing.assert_close(sincos_added(dim, side, side)[0], square[1:], atol=1e-6, rtol=0)


def test_sincos_rows_and_columns_match_mae_on_a_rectangular_grid() -> None:
    """MAE's ``get_2d_sincos_pos_embed_from_grid`` on a 3 x 5 grid laid out as MAE lays out its square one: the
    same table, so vispe reads rows and columns as MAE does; with the two halves of the channels swapped (row
    first), it would not be."""
    record = recorded('ape_sincos')
    dim, (h, w) = record['dim'], record['rect']
    ours = sincos_added(dim, h, w)[0]
    torch.testing.assert_close(ours, record['rect_table'], atol=1e-6, rtol=0)
    swapped = torch.cat([ours[:, dim // 2 :], ours[:, : dim // 2]], dim=-1)
    assert (swapped - record['rect_table']).abs().max() > 0.5


def test_bicubic_without_antialias_matches_mae_interpolate_pos_embed() -> None:
    """MAE's (DeiT's) ``interpolate_pos_embed`` from 4 x 4 to 6 x 6 and to 3 x 3: ape_learned with
    ``strategy='bicubic'`` and ``antialias=False`` adds the same table up to float32 rounding (timm resamples in
    float32, MAE here in float64); vispe's default (antialiased, timm's) differs from it at both sizes, so the test
    tells them apart."""
    record = recorded('ape_learned_mae')
    for antialias in (False, True):
        enc = build_encoding(
            {'type': 'ape_learned', 'strategy': 'bicubic', 'antialias': antialias},
            dim=record['dim'], grid_size=tuple(record['grid']),
        ).double()  # fmt: skip
        with torch.no_grad():
            enc.pos_embed.copy_(record['pos_embed'])
        for case in record['cases']:
            h, w = case['grid']
            ours = enc.embed(torch.zeros(1, h * w, record['dim'], dtype=torch.float64), grid_positions(h, w))
            if antialias:
                assert (ours - case['table']).abs().max() > 0.05
            else:
                torch.testing.assert_close(ours, case['table'], atol=1e-5, rtol=0)
