"""LOOPE (vispe.encodings.loope): the Gilbert curve is a Hamiltonian path of the grid with unit steps on any
rectangle, its tensor form (for symbolic grids) gives the same order, the embedding is a 1D sinusoid of the patch's
index along the order at init, the context bias learns and resizes, and the model compiles as one graph, runs at
unseen sizes and on mixed-size batches."""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo as dynamo
from conftest import TINY_VIT
from test_compile import GraphCheck, train_step
from torch._dynamo.utils import counters

import vispe
from vispe.encodings.loope import curve_cells, curve_ranks, order_ranks, sine_table, traced_gilbert_ranks
from vispe.positions import grid_coords, grid_positions

SHAPES = [(14, 14), (8, 8), (5, 7), (7, 5), (1, 6), (6, 1), (3, 10), (4, 5), (5, 4), (9, 2), (1, 1), (2, 2), (16, 24)]


def encoding(**options):
    return vispe.build_encoding(dict(type='loope', **options), dim=32, grid_size=(4, 6))


def table(enc, h, w):
    """The (h*w, D) table ``enc`` adds to the patch tokens of an h x w grid (its embed of zero tokens)."""
    return enc.embed(torch.zeros(1, h * w, enc.dim), grid_positions(h, w))[0]


def sinusoid(index: list[float], dim: int) -> torch.Tensor:
    """The 1D transformer sinusoid of each position, computed entry by entry: [sin(x w_k) | cos(x w_k)]."""
    rows = []
    for x in index:
        freqs = [1.0 / 10000 ** (2 * k / dim) for k in range(dim // 2)]
        rows.append([math.sin(x * f) for f in freqs] + [math.cos(x * f) for f in freqs])
    return torch.tensor(rows)


@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: f'{s[0]}x{s[1]}')
def test_gilbert_curve_visits_every_cell_once_with_unit_steps(shape):
    h, w = shape
    cells = curve_cells(h, w)
    assert sorted(cells) == [(r, c) for r in range(h) for c in range(w)]  # every cell, once
    steps = [abs(a[0] - b[0]) + abs(a[1] - b[1]) for a, b in zip(cells, cells[1:])]
    assert all(s == 1 for s in steps), f'{h}x{w}: a step that is not to a 4-neighbour'
    assert cells[0] == (0, 0)


def test_gilbert_curve_is_a_unit_step_path_on_every_small_rectangle():
    for h in range(1, 13):
        for w in range(1, 13):
            cells = curve_cells(h, w)
            assert len(set(cells)) == h * w
            assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(cells, cells[1:])), (h, w)


def test_gilbert_curve_is_hilbert_on_a_power_of_two_square():
    """On 2^k x 2^k grids the curve is Hilbert's: it ends at the other corner of its first side, and each quarter of
    the curve fills one quadrant."""
    for side in (2, 4, 8, 16):
        cells = curve_cells(side, side)
        assert cells[-1] in {(0, side - 1), (side - 1, 0)}
        q = side * side // 4
        for part in range(4):
            rows = {r // (side // 2) for r, _ in cells[part * q : (part + 1) * q]}
            cols = {c // (side // 2) for _, c in cells[part * q : (part + 1) * q]}
            assert len(rows) == len(cols) == 1, f'{side}: quarter {part} spans several quadrants'


@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: f'{s[0]}x{s[1]}')
def test_tensor_ranks_of_symbolic_grids_equal_the_curve(shape):
    h, w = shape
    ranks = traced_gilbert_ranks(torch.tensor([h, w], dtype=torch.float32), grid_coords(h, w))
    assert torch.equal(ranks, torch.tensor(order_ranks('gilbert', h, w)))
    assert curve_ranks('gilbert', h, w) == order_ranks('gilbert', h, w)  # the cached copy


def test_raster_without_context_is_the_1d_sine_of_the_raster_index():
    enc = encoding(order='raster', context=False)
    assert not list(enc.parameters())
    torch.testing.assert_close(table(enc, 4, 6), sinusoid(list(range(24)), 32), atol=1e-6, rtol=0)


def test_at_init_gilbert_is_the_1d_sine_of_the_curve_index():
    """Context zero: each patch gets the sinusoid of its index along the curve, i.e. the raster table's row of that
    index: E depends on the curve index alone."""
    enc = encoding()
    assert torch.equal(enc.context_bias, torch.zeros(4, 6))
    ranks = order_ranks('gilbert', 4, 6)
    torch.testing.assert_close(table(enc, 4, 6), sinusoid([float(r) for r in ranks], 32), atol=1e-6, rtol=0)
    raster = table(encoding(order='raster', context=False), 4, 6)
    assert torch.equal(table(enc, 4, 6), raster[list(ranks)])
    # consecutive indices, whose sinusoids are the closest, belong to grid neighbours
    cells = curve_cells(4, 6)
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(cells, cells[1:]))


def test_context_bias_shifts_the_positions_and_learns():
    enc = encoding()
    with torch.no_grad():
        enc.context_bias.copy_(torch.linspace(-2, 3, 24).reshape(4, 6))
    ranks = torch.tensor(order_ranks('gilbert', 4, 6), dtype=torch.float32)
    expected = sinusoid((ranks + enc.context_bias.reshape(-1)).tolist(), 32)
    torch.testing.assert_close(table(enc, 4, 6), expected, atol=1e-5, rtol=0)
    enc.zero_grad()
    (table(enc, 4, 6) * torch.randn(24, 32)).sum().backward()
    assert enc.context_bias.grad is not None and (enc.context_bias.grad != 0).all()
    assert enc.no_weight_decay() == {'context_bias'}


@pytest.mark.parametrize('strategy', ['interpolate', 'extend'])
def test_unseen_grid_recomputes_the_curve_and_resizes_the_context(strategy):
    enc = encoding()
    enc.strategy = strategy
    with torch.no_grad():
        enc.context_bias.fill_(0.75)  # a constant resizes to itself
    ranks = torch.tensor(order_ranks('gilbert', 8, 10), dtype=torch.float32)
    scale = 24 / 80 if strategy == 'interpolate' else 1.0
    positions = enc.index_positions((8, 10), torch.device('cpu'))
    torch.testing.assert_close(positions, ranks * scale)
    if strategy == 'interpolate':  # the positions stay in the trained range [0, N_train)
        assert positions.max() < 24
    torch.testing.assert_close(enc.context_positions((8, 10)), torch.full((80,), 0.75))
    expected = sinusoid((ranks * scale + 0.75).tolist(), 32)
    torch.testing.assert_close(table(enc, 8, 10), expected, atol=1e-5, rtol=0)


def test_options_are_checked():
    with pytest.raises(ValueError, match="order must be one of \\['gilbert', 'raster'\\]"):
        encoding(order='hilbert')
    with pytest.raises(ValueError, match='even model width'):
        vispe.build_encoding('loope', dim=33)
    with pytest.raises(ValueError, match='at least 1 x 1'):
        curve_cells(0, 3)
    for start in (-1, True, 1.5):
        with pytest.raises(ValueError, match='start is the index of the first patch'):
            encoding(start=start)


def test_start_shifts_every_patch_position_by_the_same_index():
    """``start=1`` (the authors' numbering) is the table of the positions one further along the curve."""
    grid = grid_positions(4, 6)
    base = encoding(context=False).position_table(grid, torch.float32)
    shifted = encoding(context=False, start=1).position_table(grid, torch.float32)
    ranks = torch.tensor(order_ranks('gilbert', 4, 6), dtype=torch.float32)
    torch.testing.assert_close(base, sine_table(ranks, 32, 10000.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(shifted, sine_table(ranks + 1, 32, 10000.0), atol=1e-6, rtol=0)


@pytest.mark.parametrize('options', [{}, dict(order='raster', context=False)], ids=['gilbert', 'raster-1d-sine'])
def test_vit_trains_and_runs_at_unseen_resolutions(options):
    model = vispe.create_model('vit_tiny_patch16_224', encoding=dict(type='loope', **options), **TINY_VIT)
    out = model(torch.randn(2, 3, 32, 32))
    out.square().mean().backward()
    if options.get('context', True):
        assert model.pe['loope'].context_bias.grad.abs().sum() > 0
    for strategy in ('interpolate', 'extend'):
        model.pe['loope'].strategy = strategy
        with torch.no_grad():
            assert torch.isfinite(model(torch.randn(1, 3, 48, 72))).all()
            assert model(torch.randn(1, 3, 24, 40)).shape == (1, 5)


def test_mixed_size_batch_gives_each_image_what_it_gives_alone():
    model = vispe.create_model('vit_tiny_patch16_224', encoding='loope', mixed_sizes='pad', **TINY_VIT).eval()
    with torch.no_grad():
        model.pe['loope'].context_bias.normal_()
        batch = [torch.randn(3, h, w) for h, w in [(32, 32), (24, 40), (16, 16), (24, 40)]]
        mixed = model(batch)
        alone = torch.cat([model(x[None]) for x in batch])
    torch.testing.assert_close(mixed, alone, atol=2e-5, rtol=1e-4)


def test_compiles_as_one_graph_without_breaks():
    """Two training steps at the training size and one at another: no graph break (the curve is a constant of the
    static-size graph), equal to eager; the second size is a new graph of its own, the curve recomputed."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding='loope', **TINY_VIT).train()
    dynamo.reset()
    counters.clear()
    check = GraphCheck()
    compiled = torch.compile(model, backend=check, dynamic=False)
    inputs = (torch.randn(2, 3, 32, 32),)
    for seed in (0, 1):
        eager, step = train_step(model, inputs, seed), train_step(compiled, inputs, seed)
        torch.testing.assert_close(step[0], eager[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step[1]['pe.loope.context_bias'], eager[1]['pe.loope.context_bias'])
    assert check.graphs == 1 and not counters['graph_break'], dict(counters['graph_break'])
    other = torch.randn(1, 3, 24, 40)
    torch.testing.assert_close(compiled(other), model(other), atol=1e-5, rtol=1e-5)
    assert not counters['graph_break']


def test_traced_graph_computes_the_curve_of_each_size():
    """An FX graph traced once (the grid symbolic: the ranks are the tensor operations) gives the eager outputs at
    sizes other than the one it runs first, Gilbert curves of odd and non-square grids included."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding='loope', **TINY_VIT).eval()
    with torch.no_grad():
        model.pe['loope'].context_bias.normal_()
        graph = torch.fx.symbolic_trace(model)
        for size in [(32, 32), (24, 40), (40, 56), (8, 48)]:
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(graph(x), model(x), atol=1e-5, rtol=1e-5)
