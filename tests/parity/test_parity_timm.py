"""Parity with timm 1.0.31 (recorder: tools/parity/record_ape_learned.py): the learned table of ``ape_learned``
resampled to other grids with its ``bicubic``, ``bilinear`` and ``nearest`` strategies, as timm's
``resample_abs_pos_embed`` and a timm ViT with ``dynamic_img_size`` resample theirs."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('ape_learned', 'strategy:bicubic', 'strategy:bilinear', 'strategy:nearest')


def ape_learned(record: dict, **options) -> torch.nn.Module:
    """vispe's ape_learned on the recorded training grid, the recorded table copied in."""
    enc = build_encoding({'type': 'ape_learned', **options}, dim=record['dim'], grid_size=tuple(record['grid']))
    with torch.no_grad():
        enc.pos_embed.copy_(record['pos_embed'])
    return enc


def added_table(enc: torch.nn.Module, grid: list[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What ``embed`` adds to the h x w patch tokens: (1, h*w, D)."""
    x = torch.zeros(1, grid[0] * grid[1], enc.pos_embed.shape[-1], dtype=dtype)
    return enc.embed(x, grid_positions(*grid))


@pytest.mark.parametrize('strategy', ['bicubic', 'bilinear', 'nearest'])
def test_resampled_table_matches_timm(strategy: str) -> None:
    """Every recorded grid (larger, smaller, larger on one axis and smaller on the other) for each strategy, with
    vispe's default antialiasing (timm's) and with ``antialias=False``: the table that ``embed`` adds equals timm's
    ``resample_abs_pos_embed`` on the same table, up to float32 rounding (both resample in float32)."""
    record = recorded('ape_learned')
    cases = [c for c in record['cases'] if c['interpolation'] == strategy]
    assert cases
    for case in cases:
        antialias = case['antialias'] or strategy == 'nearest'  # nearest: vispe asks for none whatever the option
        enc = ape_learned(record, strategy=strategy, antialias=antialias)
        torch.testing.assert_close(added_table(enc, case['grid']), case['table'], atol=1e-6, rtol=1e-6)


def test_the_antialias_option_selects_between_timms_two_resamplings() -> None:
    """Bicubic: antialiased and plain differ at every recorded grid (another kernel, not only when shrinking), so
    the default (timm's) and ``antialias=False`` (DeiT's and MAE's) are told apart; bilinear: only when shrinking."""
    record = recorded('ape_learned')
    by_key = {(c['interpolation'], c['antialias'], tuple(c['grid'])): c['table'] for c in record['cases']}
    for grid in {tuple(c['grid']) for c in record['cases']}:
        assert (by_key['bicubic', True, grid] - by_key['bicubic', False, grid]).abs().max() > 0.05
        ours = added_table(ape_learned(record, strategy='bicubic'), list(grid))
        assert (ours - by_key['bicubic', False, grid]).abs().max() > 0.05
    shrunk = (by_key['bilinear', True, (3, 2)] - by_key['bilinear', False, (3, 2)]).abs().max()
    grown = (by_key['bilinear', True, (6, 5)] - by_key['bilinear', False, (6, 5)]).abs().max()
    assert shrunk > 0.05 and grown < 1e-5


def test_default_matches_a_timm_vit_at_another_image_size() -> None:
    """A timm ViT with ``dynamic_img_size=True`` and ``no_embed_class=True`` at a 6 x 5 patch grid (its table made
    for 4 x 4): the patch tokens it passes on equal vispe's default ``ape_learned`` (bicubic, antialiased) applied to
    the same tokens; its cls token gets no table entry, as vispe's prefix tokens get none."""
    record = recorded('ape_learned')
    enc = ape_learned(record)
    assert enc.strategy == 'bicubic'
    tokens = record['vit_tokens']  # (B, h, w, D)
    ours = enc.embed(tokens.flatten(1, 2), grid_positions(*record['vit_grid']))
    torch.testing.assert_close(ours, record['vit_out'][:, 1:], atol=1e-6, rtol=1e-6)


def test_training_grid_adds_the_table_itself() -> None:
    """At the training grid timm leaves the table as it is (no resampling, whatever the strategy); so does vispe,
    bit for bit."""
    record = recorded('ape_learned')
    for strategy in ('bicubic', 'bilinear', 'nearest'):
        table = added_table(ape_learned(record, strategy=strategy), record['grid'])
        assert torch.equal(table, record['pos_embed'])
