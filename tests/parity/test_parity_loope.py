"""Parity with the LOOPE authors' code, AbtahiMajeed144/LOOPE (recorder: tools/parity/record_loope.py): the curve
order (``gilbert_2d``), the fixed curve table (``get_hilbert_pos_embed``) at the training grid and, for ``extend``,
at an unseen one, and ``ArtPE``'s table given its context bias.

The reference interleaves sin and cos over the channels where vispe puts the sines first: the tests permute vispe's
channels (``interleaved``), a fixed permutation of the model's channels. The reference numbers the patches from 1
(its index 0 is the cls token), vispe from ``start`` (0 by default); its context bias is computed from each image,
vispe's is a learned table (the departure in ``LOOPE``'s docstring), so ``ArtPE`` is compared given its bias."""

from __future__ import annotations

import pytest
import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.encodings.loope import order_ranks
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('loope', 'strategy:extend')


def loope_table(side: int, train: int, dim: int, **options) -> torch.Tensor:
    """vispe's (N, D) table of a side x side grid, its channels in the reference's order."""
    enc = build_encoding({'type': 'loope', **options}, dim=dim, grid_size=(train, train))
    return interleaved(enc.position_table(grid_positions(side, side), torch.float32))


def test_gilbert_curve_is_the_authors_on_square_grids() -> None:
    """Each cell's index along the curve, on squares of side 4 to 20 (10, 17 and 20 among them: the halving of
    an odd edge pointing backwards, by floor division as theirs, decides them)."""
    record = recorded('loope')
    for side, curve in zip(record['sides'], record['curves']):
        assert list(order_ranks('gilbert', side, side)) == (curve.long() - 1).tolist(), f'{side} x {side}'


def test_fixed_table_is_the_authors_with_their_first_index() -> None:
    """``context=False, start=1``: the authors' ``get_hilbert_pos_embed`` at the patch tokens (their row 0 is the
    cls token's). vispe's default ``start=0`` numbers the patches from 0 and gives another table."""
    record = recorded('loope')
    side, dim, reference = record['train_side'], record['dim'], record['table_train'][1:]
    ours = loope_table(side, side, dim, context=False, start=1)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)
    assert (loope_table(side, side, dim, context=False) - reference).abs().max() > 0.1


@pytest.mark.parametrize('strategy', ['extend', 'interpolate'])
def test_extend_is_the_authors_table_of_the_unseen_grid(strategy) -> None:
    """Trained on 7 x 7 and run on 10 x 10: ``extend`` is the authors' table of the 10 x 10 grid (its own curve,
    the raw index), which is all their code defines at another size; ``interpolate`` (vispe's default) scales the
    index by 49 / 100 and differs there, and is their table at the training grid."""
    record = recorded('loope')
    train, unseen, dim = record['train_side'], record['unseen_side'], record['dim']
    ours = loope_table(unseen, train, dim, context=False, start=1, strategy=strategy)
    if strategy == 'extend':
        torch.testing.assert_close(ours, record['table_unseen'][1:], atol=1e-5, rtol=1e-5)
    else:
        assert (ours - record['table_unseen'][1:]).abs().max() > 0.1
        at_train = loope_table(train, train, dim, context=False, start=1, strategy=strategy)
        torch.testing.assert_close(at_train, record['table_train'][1:], atol=1e-5, rtol=1e-5)


def test_art_pe_table_given_its_context_bias() -> None:
    """``ArtPE`` on two images: with its context bias of each image copied into ``context_bias`` (row-major, as its
    linear map orders the patches), vispe's table is the authors' for that image."""
    record = recorded('loope')
    side, dim = record['art_side'], record['dim']
    enc = build_encoding({'type': 'loope', 'start': 1}, dim=dim, grid_size=(side, side))
    pos = grid_positions(side, side)
    for context, reference in zip(record['art_context'], record['art_table']):
        with torch.no_grad():
            enc.context_bias.copy_(context.reshape(side, side))
        ours = interleaved(enc.position_table(pos, torch.float32))
        torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        enc.context_bias.zero_()
    assert (interleaved(enc.position_table(pos, torch.float32)) - record['art_table'][0]).abs().max() > 0.05
