"""Learnable Fourier features (Li et al., NeurIPS 2021)."""

import math

import pytest
import timm
import torch

import vispe
from vispe.encodings.lff import normalize_positions
from vispe.positions import Positions, grid_positions

TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5)


def lff(**kwargs):
    return vispe.build_encoding({'type': 'lff', **kwargs}, dim=16)


def test_gradients_reach_the_frequencies_and_the_mlp():
    enc = lff()
    enc.embed(torch.zeros(2, 12, 16), grid_positions(3, 4)).square().sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert enc.freqs.weight.shape == (8, 2)  # W_r: (F/2, M), F = D = 16


def test_init_and_feature_scale_follow_the_paper():
    torch.manual_seed(0)
    enc = vispe.build_encoding({'type': 'lff', 'num_features': 4096, 'gamma': 4.0}, dim=16)
    assert abs(enc.freqs.weight.std().item() - 0.25) < 0.01  # N(0, gamma^-2)
    feats = enc.features(torch.rand(7, 2))
    assert feats.shape == (7, 4096)
    # cos^2 + sin^2 = 1 per frequency: each token's feature vector has norm sqrt(F/2 / F)
    torch.testing.assert_close(feats.norm(dim=-1), torch.full((7,), math.sqrt(0.5)))


@pytest.mark.parametrize('grid', [(1, 1), (3, 5), (14, 14)])
def test_grid_positions_normalise_into_the_unit_square(grid):
    p = normalize_positions(grid_positions(*grid))
    assert p.shape == (grid[0] * grid[1], 2) and p.min() > 0 and p.max() < 1
    torch.testing.assert_close(p[0], torch.tensor([0.5 / grid[0], 0.5 / grid[1]]))


@pytest.mark.parametrize('shape', [(50, 3), (2, 50, 3)])
def test_points_are_min_max_normalised_per_sample(shape):
    coords = torch.randn(*shape) * torch.tensor([10.0, 0.1, 3.0]) + 5.0
    p = normalize_positions(Positions(coords))
    assert p.shape == shape
    torch.testing.assert_close(p.amin(-2), torch.zeros(*shape[:-2], 3))
    torch.testing.assert_close(p.amax(-2), torch.ones(*shape[:-2], 3))
    flat = Positions(torch.cat([torch.randn(5, 2), torch.full((5, 1), 2.0)], dim=1))  # a flat z axis
    assert torch.isfinite(normalize_positions(flat)).all() and normalize_positions(flat)[:, 2].abs().max() == 0


def test_3d_points_embed_per_sample():
    enc = lff(ndim=3)
    coords = torch.randn(2, 30, 3)
    out = enc.embed(torch.zeros(2, 30, 16), Positions(coords))
    assert out.shape == (2, 30, 16) and torch.isfinite(out).all()
    # min-max per sample: scaling and shifting a cloud gives the same embedding
    out2 = enc.embed(torch.zeros(2, 30, 16), Positions(coords * 3.0 + 1.0))
    torch.testing.assert_close(out2, out, atol=1e-5, rtol=1e-5)
    assert (out[0] - out[1]).abs().max() > 1e-4  # different clouds, different embeddings
    with pytest.raises(ValueError, match='ndim=2'):
        enc.embed(torch.zeros(1, 4, 16), grid_positions(2, 2))


def corner_similarity(enc, grid=(14, 14)):
    """Cosine similarity of the Fourier features of the two opposite corner tokens of a grid."""
    feats = enc.features(enc.positions(grid_positions(*grid)))
    return torch.nn.functional.cosine_similarity(feats[0], feats[-1], dim=0).item()


def test_default_features_vary_over_the_grid_at_init():
    """E[cos(w . Delta)] = exp(-|Delta|^2 / (2 gamma^2)) for w ~ N(0, gamma^-2 I): corners of a 14 x 14 grid are 13
    tokens apart per axis, so 0.18 in token-grid units (the default) and 0.991 on [0, 1] positions."""
    torch.manual_seed(0)
    expected = math.exp(-(13**2 + 13**2) / (2 * 10.0**2))
    enc = vispe.build_encoding({'type': 'lff'}, dim=768)  # F = 768: the estimate's std is about 0.035
    assert enc.normalize is None and abs(corner_similarity(enc) - expected) < 0.15
    assert corner_similarity(enc) < 0.5  # clearly below 0.99: the encoding tells the corners apart at init
    normalised = vispe.build_encoding({'type': 'lff', 'normalize': True}, dim=768)
    assert corner_similarity(normalised) > 0.98  # what the [0, 1] positions gave with gamma = 10
    rescaled = vispe.build_encoding({'type': 'lff', 'normalize': True, 'gamma': 10.0 / 14}, dim=768)
    assert corner_similarity(rescaled) < 0.5  # the same kernel on [0, 1] needs gamma / the grid size


def test_default_embedding_is_the_papers_formula_on_token_grid_coordinates():
    torch.manual_seed(0)
    enc = lff()
    pos = grid_positions(3, 4)
    rows, cols = torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing='ij')
    X = torch.stack([rows.flatten(), cols.flatten()], dim=-1)  # raw (row, col), no normalisation
    W = enc.freqs.weight  # W_r (F/2, M)
    r = torch.cat([torch.cos(X @ W.t()), torch.sin(X @ W.t())], dim=-1) / math.sqrt(16)
    W1, W2 = enc.mlp[0], enc.mlp[2]
    expected = W2(torch.nn.functional.gelu(W1(r)))
    x = torch.randn(2, 12, 16)
    torch.testing.assert_close(enc.embed(x, pos), x + expected)
    torch.testing.assert_close(enc.positions(pos), X)
    # normalize=True: the same formula on (coord + 0.5) / size
    norm = lff(normalize=True)
    torch.testing.assert_close(norm.positions(pos), (X + 0.5) / torch.tensor([3.0, 4.0]))
    # points stay min-max normalised unless normalize=False
    cloud = Positions(torch.randn(20, 3) * 4.0)
    torch.testing.assert_close(lff(ndim=3).positions(cloud), normalize_positions(cloud))
    torch.testing.assert_close(lff(ndim=3, normalize=False).positions(cloud), cloud.coords)


def test_same_normalised_position_gives_the_same_embedding():
    enc = lff(normalize=True)
    small = enc.embed(torch.zeros(1, 9, 16), grid_positions(3, 3))[0].reshape(3, 3, 16)
    large = enc.embed(torch.zeros(1, 81, 16), grid_positions(9, 9))[0].reshape(9, 9, 16)
    # (r + 0.5) / h: row 0 of 3 and row 1 of 9 are both 1/6; row 1 of 3 and row 4 of 9 are both 1/2
    torch.testing.assert_close(small[0, 1], large[1, 4])
    torch.testing.assert_close(small[1, 1], large[4, 4])
    assert (small[0, 0] - large[0, 0]).abs().max() > 1e-6  # 1/6 vs 1/18: different positions differ


def test_bf16_autocast_is_finite_and_close_to_fp32():
    enc = lff(gamma=0.5)  # high frequencies (std 2 per token): bf16 angles would be visibly wrong
    pos = grid_positions(14, 14)
    x = torch.randn(2, 196, 16)
    ref = enc.embed(x, pos)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = enc.embed(x, pos)
        feats = enc.features(enc.positions(pos))
    assert feats.dtype == torch.float32
    assert torch.isfinite(out).all() and (out - ref).abs().max() < 0.05
    assert (out - ref).abs().max() > 0  # the MLP did run in bf16


@pytest.mark.parametrize('kwargs', [dict(num_features=15), dict(num_features=0), dict(gamma=0.0)])
def test_bad_arguments_name_the_fix(kwargs):
    with pytest.raises(ValueError, match='even num_features|gamma > 0'):
        lff(**kwargs)


@pytest.mark.parametrize('encoding', ['lff', ['rope_mixed', 'lff']])
def test_models_train_at_two_resolutions(encoding):
    model = vispe.create_model('vit_tiny_patch16_224', encoding=encoding, **TINY)
    for size in [(32, 32), (40, 24)]:
        model.zero_grad()
        out = model(torch.randn(2, 3, *size))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.square().sum().backward()
        assert model.pe['lff'].freqs.weight.grad.abs().sum() > 0


def test_timm_knows_the_name():
    assert timm.is_model('vit_tiny_patch16_lff_224')
    assert timm.create_model('vit_tiny_patch16_lff_224', **TINY).encoding_names == ['lff']


def test_a_state_of_another_position_unit_is_refused_not_loaded_silently():
    """lff's default unit changed (token-grid units, issue 18): a checkpoint trained on [0, 1] positions would load key
    for key and give other numbers, so loading says how to build the model instead."""
    import vispe
    from vispe.engine.checkpoint import CheckpointError, load_state

    def model(**lff):
        torch.manual_seed(0)
        kwargs = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
        return vispe.create_model('vit_tiny_patch16_224', encoding=dict(type='lff', **lff), **kwargs)

    old = {k: v for k, v in model(normalize=True).state_dict().items() if not k.endswith('position_unit')}
    with pytest.raises(CheckpointError, match=r"normalised to \[0, 1\].*dict\(type='lff', normalize=True\)"):
        load_state(model(), old)
    normalized = model(normalize=True)
    load_state(normalized, old)  # the unit it was trained with: loads
    x = torch.randn(2, 3, 32, 32)
    reference = model(normalize=True)
    reference.load_state_dict({**old, 'pe.lff.position_unit': reference.pe.lff.position_unit})
    torch.testing.assert_close(normalized(x), reference(x))
    with pytest.raises(CheckpointError, match='trained with normalize=None but is built with normalize=True'):
        load_state(model(normalize=True), model().state_dict())
