"""Resolution strategies of the rotary family above and below the training size: none, interpolate (PI), ntk, yarn."""

import math

import pytest
import torch

import vispe
from vispe.encodings.rotary import rotate_by_rows
from vispe.encodings.rotary_scaling import yarn_factors
from vispe.evaluation.trained_model import available_strategies, set_strategy
from vispe.kernels.rotary import rotary_table, rotate_pairs
from vispe.positions import Positions, grid_coords, grid_positions

ROTARY = ['rope_axial', 'rope_mixed']
STRATEGIES = ['interpolate', 'ntk', 'yarn']


def rotary(name, strategy='none', dim=64, num_heads=4, grid_size=(4, 4), **kwargs):
    enc = vispe.build_encoding(name, dim=dim, num_heads=num_heads, grid_size=grid_size, **kwargs)
    if name == 'rope_mixed':  # a trained-looking, non-axis-aligned frequency set
        torch.nn.init.normal_(enc.freqs, std=0.5)
    enc.strategy = strategy
    return enc


def grid_angles(enc, h, w):
    """Angles on an h x w grid as (..., h, w, d/2) (heads in front for rope_mixed)."""
    a = enc.angles(grid_coords(h, w), (h, w))
    return a.reshape(*a.shape[:-2], h, w, a.shape[-1])


def old_axial_angles(coords, freqs):
    """rope_axial's angles before strategies existed: columns first, then rows."""
    return torch.cat([coords[..., 1, None] * freqs, coords[..., 0, None] * freqs], dim=-1)


def logits(enc, q, k, pos):
    q2, k2 = enc.rotate(q, k, pos)
    n = pos.num_prefix
    return q2[..., n:, :] @ k2[..., n:, :].transpose(-1, -2)


def test_rotary_encodings_offer_the_strategies():
    for name in ROTARY:
        enc = rotary(name)
        assert type(enc).strategies == ('none', 'interpolate', 'ntk', 'yarn', 'yarn_paper', 'dype_ntk', 'dype_yarn')
        assert type(enc).opt_in_strategies == ('yarn_paper', 'dype_ntk', 'dype_yarn')  # a variant; a DiT's time
        assert enc.strategy == 'none' and enc.train_grid == (4, 4)


@pytest.mark.parametrize('name', ROTARY)
def test_strategy_without_training_grid_raises(name):
    enc = vispe.build_encoding(name, dim=64, num_heads=4)
    assert enc.train_grid is None
    enc.strategy = 'none'
    for strategy in STRATEGIES:
        with pytest.raises(ValueError, match=rf"strategy '{strategy}'.*training grid.*grid_size"):
            enc.strategy = strategy
    with pytest.raises(ValueError, match='choose one of'):
        rotary(name).strategy = 'lanczos'


def test_none_is_plain_extension_bit_identical():
    enc = rotary('rope_axial')
    plain = vispe.build_encoding('rope_axial', dim=64, num_heads=4)  # no training grid at all
    pos = grid_positions(8, 12, num_prefix=1)  # larger than the (4, 4) training grid
    ref = old_axial_angles(pos.coords, enc.ladder(0))
    assert torch.equal(enc.angles(pos.coords, pos.grid), ref)
    q, k = torch.randn(2, 4, 1 + 96, 16), torch.randn(2, 4, 1 + 96, 16)
    table = rotary_table(ref, 1)
    for e in (enc, plain):
        q2, k2 = e.rotate(q, k, pos)
        assert torch.equal(q2, rotate_pairs(q, table)) and torch.equal(k2, rotate_pairs(k, table))
    mixed = rotary('rope_mixed')
    f = mixed.freqs.float()
    ref_mixed = pos.coords[:, 1, None] * f[0, :, None] + pos.coords[:, 0, None] * f[1, :, None]
    assert torch.equal(mixed.angles(pos.coords, pos.grid), ref_mixed)


@pytest.mark.parametrize('name', ROTARY)
def test_interpolate_maps_the_larger_grid_onto_the_training_range(name):
    enc = rotary(name, 'interpolate')
    train = grid_angles(enc, 4, 4)
    big = grid_angles(enc, 8, 8)  # s = 2 on both axes
    assert torch.equal(big[..., ::2, ::2, :], train)  # position (2r, 2c) of 8x8 == (r, c) of 4x4
    assert not torch.equal(big[..., 1:5, 1:5, :], train)  # plain extension would give this
    # per axis: 4 rows (s = 1), 8 columns (s = 2): only the columns are rescaled
    wide = grid_angles(enc, 4, 8)
    assert torch.equal(wide[..., :, ::2, :], train)
    enc.strategy = 'none'
    none_wide = grid_angles(enc, 4, 8)
    assert not torch.equal(wide, none_wide)
    if name == 'rope_axial':  # the row pairs (second half) are untouched, the column pairs halved
        half = none_wide.shape[-1] // 2
        assert torch.equal(wide[..., half:], none_wide[..., half:])
        torch.testing.assert_close(wide[..., :half], none_wide[..., :half] / 2)


def test_ntk_changes_theta_as_specified():
    enc = rotary('rope_axial', 'ntk', dim=128, num_heads=4)  # head_dim 32, d_a = 16, 8 pairs per axis
    d_a, s = 16, 2.0
    theta = 100.0 * s ** (d_a / (d_a - 2))
    expected = torch.tensor([1 / theta ** (2 * k / d_a) for k in range(d_a // 2)])
    cols, rows = enc.axis_frequencies((1.0, s))[1], enc.axis_frequencies((1.0, s))[0]
    torch.testing.assert_close(cols, expected)
    assert torch.equal(rows, enc.ladder(0))  # an axis that did not grow keeps theta
    assert cols[0] == enc.ladder(0)[0] and torch.allclose(cols[-1], enc.ladder(0)[-1] / s)  # fastest kept, slowest / s
    # through angles: token (1, 1) of a 4x8 grid has the frequencies as angles, columns first
    one = torch.ones(1, 2)
    torch.testing.assert_close(enc.angles(one, (4, 8))[0], torch.cat([expected, enc.ladder(0)]))


def test_ntk_on_learned_frequencies_scales_by_magnitude_rank():
    enc = rotary('rope_mixed', 'ntk', dim=128, num_heads=4)
    d_a, s = 16, 2.0
    factors = enc.frequency_factors((s, s))  # (2, H, d/2)
    mags = enc.freqs.detach().norm(dim=0)  # (H, 16): two groups of 8 pairs
    for h in range(4):
        for group in (slice(0, 8), slice(8, 16)):
            ranks = mags[h, group].argsort(descending=True).argsort().float()
            torch.testing.assert_close(factors[0, h, group], s ** (-2 * ranks / (d_a - 2)))
    assert torch.equal(factors[0], factors[1])
    # only the grown axis' component is scaled: columns 2x, rows 1x
    wide = enc.frequency_factors((1.0, s))
    assert torch.equal(wide[1], torch.ones_like(wide[1])) and torch.equal(wide[0], factors[0])


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones():
    enc = rotary('rope_axial', 'yarn', dim=128, num_heads=4, grid_size=(256, 256))
    w = enc.ladder(0)  # 8 pairs: 1 ... 0.018; rotations over 256 tokens: 40.7 ... 0.72
    rotations = 256 * w / (2 * math.pi)
    assert rotations[0] > 32 and rotations[-1] < 1
    cols = enc.axis_frequencies((1.0, 2.0))[1]
    assert cols[0] == w[0]  # many rotations: extrapolated, unchanged
    assert cols[-1] == w[-1] / 2  # under one rotation: interpolated
    mid = (rotations > 1) & (rotations < 32)
    assert mid.sum() >= 4 and ((cols[mid] < w[mid]) & (cols[mid] > w[mid] / 2)).all()  # blended
    keep = cols / w * 2 - 1  # g_k: 1 kept ... 0 interpolated, linear over the pair index inside the ramp
    steps = keep[:-1] - keep[1:]
    inside = steps > 1e-6
    assert inside.sum() >= 3 and torch.allclose(steps[inside], steps[inside][0])  # the values: tests/parity
    assert torch.equal(enc.axis_frequencies((1.0, 2.0))[0], w)  # rows did not grow


@pytest.mark.parametrize('name', ROTARY)
def test_yarn_uses_each_axis_training_length(name):
    enc = rotary(name, 'yarn', dim=128, num_heads=4, grid_size=(4, 256))  # 4 rows, 256 columns in training

    def expected(w, length, groups=1):
        return yarn_factors(w, 2.0, length, groups)  # multiplier of w at s = 2 over that axis' training length

    if name == 'rope_axial':
        rows, cols = enc.axis_frequencies((2.0, 2.0))
        torch.testing.assert_close(cols, enc.ladder(0) * expected(enc.ladder(0), 256))
        # 4 rows: every pair turns < 1 time; all interpolated but the fastest, which the references' ramp keeps
        torch.testing.assert_close(rows[1:], enc.ladder(0)[1:] / 2)
        assert rows[0] == enc.ladder(0)[0]
    else:
        factors = enc.frequency_factors((2.0, 2.0))
        mags = enc.freqs.detach().norm(dim=0)
        torch.testing.assert_close(factors[0], expected(mags, 256, enc.sections))  # f_x multiplies the column
        torch.testing.assert_close(factors[1], expected(mags, 4, enc.sections))
        assert not torch.equal(factors[0], factors[1])


@pytest.mark.parametrize('name', ROTARY)
def test_yarn_scales_the_logits(name):
    enc = rotary(name, 'yarn')
    q, k = torch.randn(1, 4, 2 + 64, 16), torch.randn(1, 4, 2 + 64, 16)
    pos = grid_positions(8, 8, num_prefix=2)  # s = 2
    q2, k2 = enc.rotate(q, k, pos)
    factor = (0.1 * math.log(2.0) + 1) ** 2  # YaRN: sqrt(1/t) = 0.1 ln s + 1 on q and k each (test_parity.py)
    # prefix tokens are not rotated: their logits are only scaled
    torch.testing.assert_close(
        q2[..., :2, :] @ k2[..., :2, :].transpose(-1, -2), factor * (q[..., :2, :] @ k[..., :2, :].mT)
    )
    table = rotary_table(enc.angles(pos.coords, pos.grid), 2)
    ref = rotate_pairs(q, table) @ rotate_pairs(k, table).transpose(-1, -2)
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2), factor * ref, rtol=1e-4, atol=1e-4)
    q1, _ = enc.rotate(
        q[..., :18, :], k[..., :18, :], grid_positions(4, 4, num_prefix=2)
    )  # the training grid: no scaling
    assert torch.equal(q1[..., :2, :], q[..., :2, :])


@pytest.mark.parametrize('name', ROTARY)
@pytest.mark.parametrize('strategy', STRATEGIES)
def test_strategies_keep_logits_relative(name, strategy):
    enc = rotary(name, strategy)
    q, k = torch.randn(2, 4, 1 + 48, 16), torch.randn(2, 4, 1 + 48, 16)
    base = grid_positions(6, 8, num_prefix=1)  # grows both axes (1.5x, 2x)
    ref = logits(enc, q, k, base)
    for offset in ([3.0, -7.0], [0.25, 11.5]):
        shifted = Positions(base.coords + torch.tensor(offset), grid=(6, 8), num_prefix=1)
        torch.testing.assert_close(logits(enc, q, k, shifted), ref, atol=1e-4, rtol=1e-4)
    enc.strategy = 'none'
    assert (logits(enc, q, k, base) - ref).abs().max() > 1e-2  # the strategy did change the logits


@pytest.mark.parametrize('name', ROTARY)
def test_scales_follow_the_coordinates_without_a_grid(name):
    enc = rotary(name, 'interpolate')
    coords = grid_coords(8, 4)
    assert enc.axis_scales(coords) == (2.0, 1.0)
    assert enc.axis_scales(coords, (8, 4)) == (2.0, 1.0)
    assert torch.equal(enc.angles(coords), enc.angles(coords, (8, 4)))
    assert enc.axis_scales(grid_coords(2, 3)) == (0.5, 0.75)  # smaller grids: stretched onto the training range


@pytest.mark.parametrize('name', ROTARY)
@pytest.mark.parametrize('strategy', STRATEGIES)
def test_strategy_angles_stay_float32_under_autocast(name, strategy):
    enc = rotary(name, strategy)
    coords = grid_coords(8, 8)
    ref = enc.angles(coords, (8, 8))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        low = enc.angles(coords, (8, 8))
    assert low.dtype == torch.float32 and torch.equal(low, ref)


@pytest.mark.parametrize('name', ROTARY)
def test_strategy_selectable_on_a_model(name):
    from conftest import TINY_VIT

    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, **TINY_VIT).eval()  # train grid 4x4
    assert available_strategies(model) == ['none', 'interpolate', 'ntk', 'yarn']
    encs = [blk.attn.pe[name] for blk in model.blocks]
    assert all(e.train_grid == (4, 4) for e in encs)
    small, large = torch.randn(1, 3, 32, 32), torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref_small, ref_large = model(small), model(large)
        for strategy in STRATEGIES:
            set_strategy(model, strategy)
            assert all(e.strategy == strategy for e in encs)
            assert torch.equal(model(small), ref_small)  # the training grid: every strategy is a no-op
            assert (model(large) - ref_large).abs().max() > 1e-4
        set_strategy(model, 'none')  # cached tables are per strategy: back to the original
        assert torch.equal(model(large), ref_large)


def none_angles_at(enc, coords):
    """The encoding's angles under ``none`` at (possibly fractional) ``coords``, on the training grid's scales."""
    strategy, enc.strategy = enc.strategy, 'none'
    try:
        return enc.angles(coords, enc.train_grid)
    finally:
        enc.strategy = strategy


@pytest.mark.parametrize('name', ROTARY)
@pytest.mark.parametrize('grid', [(2, 2), (3, 3), (8, 2), (2, 8), (6, 8), (3, 12)])
def test_interpolate_matches_the_training_grid_at_the_same_normalised_position(name, grid):
    """Above, below and at other aspect ratios: the angle of token (r, c) of an h x w grid is the training angle
    at (r * H / h, c * W / w), the same fraction of the image; a 0.5x grid's tokens land on the training grid's
    even positions, its first corner on the training grid's first corner."""
    enc = rotary(name, 'interpolate')  # training grid 4 x 4
    (h, w), (th, tw) = grid, enc.train_grid
    coords = grid_coords(h, w)
    assert enc.axis_scales(coords, grid) == (h / th, w / tw)  # per axis: a 2:1 target scales rows and columns apart
    at_train = coords * torch.tensor([th / h, tw / w])
    torch.testing.assert_close(enc.angles(coords, grid), none_angles_at(enc, at_train), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('name', ROTARY)
def test_interpolate_at_half_size_lands_on_the_training_grid(name):
    enc = rotary(name, 'interpolate')
    train = grid_angles(enc, 4, 4)
    small = grid_angles(enc, 2, 2)  # s = 0.5 on both axes
    torch.testing.assert_close(small, train[..., ::2, ::2, :])  # (r, c) of 2x2 == (2r, 2c) of 4x4
    assert torch.equal(small[..., 0, 0, :], train[..., 0, 0, :])  # the first corner stays where it is
    enc.strategy = 'none'
    assert torch.equal(grid_angles(enc, 2, 2), train[..., :2, :2, :])  # none: the training grid's top-left corner


@pytest.mark.parametrize('name', ROTARY)
@pytest.mark.parametrize('strategy', ['none', 'ntk', 'yarn'])
def test_only_interpolate_acts_below_the_training_size(name, strategy):
    """none, ntk and yarn leave a shrunk axis as none does (s = 1: the rope module doc says why)."""
    enc = rotary(name, strategy)
    q, k = torch.randn(2, 4, 1 + 6, 16), torch.randn(2, 4, 1 + 6, 16)
    pos = grid_positions(2, 3, num_prefix=1)
    assert enc.axis_scales(pos.coords, pos.grid) == (1.0, 1.0)
    plain = rotary(name)
    plain.load_state_dict(enc.state_dict())
    q2, k2 = enc.rotate(q, k, pos)
    q_ref, k_ref = plain.rotate(q, k, pos)
    assert torch.equal(q2, q_ref) and torch.equal(k2, k_ref)  # no logit scaling for yarn either


@pytest.mark.parametrize('name', ROTARY)
@pytest.mark.parametrize('strategy', ['ntk', 'yarn'])
def test_ntk_and_yarn_scale_only_the_grown_axis_of_an_aspect_change(name, strategy):
    """8 x 2 at the 4 x 4 training token count: rows 2x (scaled), columns 0.5x (kept as none keeps them)."""
    enc = rotary(name, strategy)
    coords = grid_coords(8, 2)
    assert enc.axis_scales(coords, (8, 2)) == (2.0, 1.0)
    tall = enc.angles(coords, (8, 2))
    assert torch.equal(tall, enc.angles(coords, (8, 4)))  # the same scales as 8 x 4, whose columns did not change
    expected = 0.1 * math.log(math.sqrt(2.0)) + 1 if strategy == 'yarn' else 1.0  # q and k each: the paper's sqrt(1/t)
    assert enc.qk_scale(enc.axis_scales(coords, (8, 2))) == pytest.approx(expected)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('scale', [1.0, 1.3, 'per_token'])
@pytest.mark.parametrize('heads_share_rows', [True, False])
def test_rotating_by_rows_matches_the_gathered_complex_table(heads_share_rows, scale, dtype):
    # rotate_by_rows (mixed batches) has its own backward: values and the gradients of q, k and the angle rows
    # must be those of gathering e^(i rows) per token and rotating with rotate_pairs
    torch.manual_seed(0)
    B, H, T, d, R = 3, 4, 7, 8, 5
    qkv = torch.randn(B, T, 3, H, d, dtype=dtype).permute(2, 0, 3, 1, 4)  # timm's token-major q and k
    rows0 = torch.randn(R, d // 2) if heads_share_rows else torch.randn(R, H, d // 2)
    index = torch.randint(R, (B, T))
    s = torch.rand(B, 1, T, 1) + 0.5 if scale == 'per_token' else scale
    weights = torch.randn(2, B, H, T, d)
    results = []
    for gathered in (False, True):
        q, k = (qkv[i].detach().clone().requires_grad_() for i in range(2))
        rows = rows0.clone().requires_grad_()
        if gathered:
            table = rotary_table(rows, 0)[index].movedim(1, -3)  # (B, [H,] T, d/2, 2)
            table = table.unsqueeze(1) if heads_share_rows else table
            out = rotate_pairs(q, table, s), rotate_pairs(k, table, s)
        else:
            out = rotate_by_rows(q, k, rows, index, s)
        sum((o.float() * w).sum() for o, w in zip(out, weights)).backward()
        results.append((*out, q.grad, k.grad, rows.grad))
    assert all(x.dtype == dtype for x in results[0][:4])
    for new, ref in zip(*results):
        torch.testing.assert_close(new, ref, atol=1e-5, rtol=1e-5)


def test_the_former_name_of_the_grid_core_still_imports_with_a_warning() -> None:
    from vispe.encodings import rotary

    with pytest.warns(DeprecationWarning, match='GridRoPE'):
        assert rotary.RotaryStrategies is rotary.GridRoPE
