"""The RPE-2D position sampler: randomized sorted positions in training, the plain grid in evaluation."""

import pytest
import torch

import vispe
from vispe.positions import RPE2D, build_position_sampler, grid_positions
from vispe.registry import POSITION_SAMPLERS

TINY = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=3)
SAMPLER = dict(type='rpe2d', max_grid=(8, 8))


def axes(pos, h, w):
    """Per-sample row and column positions: (B, h) and (B, w), checking the grid is a product of the two."""
    c = pos.coords.reshape(-1, h, w, 2)
    rows, cols = c[:, :, 0, 0], c[:, 0, :, 1]
    assert torch.equal(c[..., 0], rows[:, :, None].expand_as(c[..., 0]))
    assert torch.equal(c[..., 1], cols[:, None, :].expand_as(c[..., 1]))
    return rows, cols


def test_registered_and_built_from_a_config():
    sampler = build_position_sampler(dict(type='rpe2d', max_grid=[16, 12]))
    assert isinstance(sampler, RPE2D) and sampler.max_grid == (16, 12)
    assert POSITION_SAMPLERS.get('rpe2d') is RPE2D
    assert build_position_sampler(None) is None


def test_samples_are_sorted_distinct_and_inside_the_range():
    sampler = RPE2D(max_grid=(9, 13))
    pos = sampler(grid_positions(5, 7, num_prefix=1), batch_size=64)
    assert pos.coords.shape == (64, 35, 2) and pos.coords.dtype == torch.float32
    assert pos.key is None and pos.cache_key() is None  # never cached
    assert pos.grid == (5, 7) and pos.num_prefix == 1
    rows, cols = axes(pos, 5, 7)
    for values, limit in ((rows, 9), (cols, 13)):
        assert (values == values.round()).all()  # integer positions
        assert (values[:, 1:] > values[:, :-1]).all()  # sorted and distinct
        assert values.min() >= 0 and values.max() <= limit - 1
        assert values.max() == limit - 1 and values.min() == 0  # the whole range is reached over 64 samples
    assert len({tuple(r.tolist()) for r in rows}) > 1 and len({tuple(c.tolist()) for c in cols}) > 1


def test_full_range_gives_the_plain_grid():
    pos = RPE2D(max_grid=(4, 6))(grid_positions(4, 6), batch_size=3)
    assert torch.equal(pos.coords, grid_positions(4, 6).coords.expand(3, -1, -1))


@pytest.mark.parametrize('encoding', ['lff', 'comrope_ap'])
def test_normalised_encodings_see_sampled_positions_on_the_large_grids_scale(encoding):
    """Coordinates drawn from [0, L) normalise by L, as the plain L x L grid does at evaluation: a token sampled at
    position (i, j) in training gets the same normalised value as token (i, j) of the largest served grid."""
    sampled = RPE2D(max_grid=(8, 12))(grid_positions(4, 6), batch_size=2, generator=torch.Generator().manual_seed(0))
    assert sampled.extent == (8, 12) and sampled.span == (8, 12) and grid_positions(4, 6).span == (4, 6)
    if encoding == 'lff':
        from vispe.encodings.lff import normalize_positions as normalise
    else:
        normalise = vispe.build_encoding(encoding, dim=32, num_heads=2, ndim=2).normalized_coords
    got = normalise(sampled)  # (2, 24, 2)
    large = normalise(grid_positions(8, 12)).reshape(8, 12, 2)
    rows, cols = sampled.coords[..., 0].long(), sampled.coords[..., 1].long()
    torch.testing.assert_close(got, large[rows, cols])
    assert 0 < got.min() and got.max() < 1


def test_deterministic_under_a_seed():
    sampler, base = RPE2D(max_grid=(16, 16)), grid_positions(4, 4)
    draws = [sampler(base, 4, torch.Generator().manual_seed(s)).coords for s in (7, 7, 8)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])


def test_bad_range_names_both_sizes():
    with pytest.raises(ValueError, match=r'max_grid \(L\) 8x4 must be >= the token grid.*5x5'):
        RPE2D(max_grid=(8, 4))(grid_positions(5, 5), 2)
    with pytest.raises(ValueError, match='max_grid'):
        RPE2D(max_grid=(8,))
    with pytest.raises(ValueError, match='no grid'):
        RPE2D(max_grid=(8, 8))(vispe.Positions(torch.zeros(4, 2)), 2)


@pytest.mark.parametrize('encoding', ['rope_axial', 'ape_sincos', 'lff'])
def test_trains_with_sampled_positions_and_evaluates_on_the_grid(encoding):
    model = vispe.create_model('vit_tiny_patch16_224', encoding=encoding, position_sampler=SAMPLER, **TINY)
    assert isinstance(model.position_sampler, RPE2D) and model.position_sampler.max_grid == (8, 8)
    x = torch.randn(4, 3, 16, 16)  # a 4x4 token grid
    out = model.train()(x)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    out.square().sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)

    sampler, model.position_sampler = model.position_sampler, None
    plain_train = model(x)  # no dropout in this model: the difference is the positions
    assert (out - plain_train).abs().max() > 1e-6  # same weights and input: only the positions differ
    model.eval()
    plain_eval = model(x)
    model.position_sampler = sampler
    assert torch.equal(model(x), plain_eval)  # evaluation ignores the sampler


def test_eval_output_equals_a_model_without_sampler():
    torch.manual_seed(1)
    with_sampler = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', position_sampler=SAMPLER, **TINY)
    torch.manual_seed(1)
    without = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', **TINY)
    assert without.position_sampler is None
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(with_sampler.eval()(x), without.eval()(x), rtol=0, atol=0)
    assert not torch.equal(with_sampler.train()(x), without.train()(x))


def test_apply_encoding_and_config_attach_the_sampler():
    import timm

    model = vispe.apply_encoding(
        timm.create_model('vit_tiny_patch16_224', **TINY), 'rope_axial', position_sampler=SAMPLER
    )
    assert isinstance(model.position_sampler, RPE2D)
    again = vispe.apply_encoding(model, 'ape_sincos')  # None keeps the sampler
    assert again.position_sampler is model.position_sampler
    built = vispe.VisionTransformerPE(encoding='lff', position_sampler=SAMPLER, **TINY)
    assert isinstance(built.position_sampler, RPE2D)
    with pytest.raises(ValueError, match='must be >= the token grid'):
        built.train()(torch.randn(1, 3, 48, 48))  # a 12x12 grid does not fit into max_grid 8x8
