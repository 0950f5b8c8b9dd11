"""Every registered image encoding, through the registry and a timm ViT (picked up automatically for new ones);
the point-cloud ones are exercised the same way in test_point_encodings.py."""

import io

import pytest
import torch

import vispe
from vispe.encodings.build import encoding_class
from vispe.positions import Positions, grid_positions

ENCODINGS = vispe.list_encodings(ndim=2)


def tiny_model(encoding, **overrides):
    from conftest import TINY_VIT

    return vispe.create_model('vit_tiny_patch16_224', encoding=encoding, **{**TINY_VIT, **overrides})


def test_registry_lists_the_foundation_encodings():
    assert {'ape_learned', 'ape_sincos', 'rope_axial', 'rope_mixed'} <= set(ENCODINGS)


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_builds_from_name_and_dict(name):
    cls = encoding_class(name)
    context = dict(dim=96, num_heads=4, ndim=cls.ndims[0], grid_size=(4, 4)[: cls.ndims[0]])
    assert type(vispe.build_encoding(name, **context)) is cls
    assert type(vispe.build_encoding({'type': name}, **context)) is cls


def test_unknown_name_lists_closest():
    with pytest.raises(ValueError, match=r"unknown encoding 'rope_mixd'.*'rope_mixed'"):
        vispe.build_encoding('rope_mixd', dim=64, num_heads=4)
    with pytest.raises(ValueError, match="'rope_axial'"):
        vispe.create_model('vit_tiny_patch16_224', encoding='rope_axal')


def test_unknown_argument_names_the_closest():
    with pytest.raises(TypeError, match="'thetta'; did you mean 'theta'"):
        vispe.build_encoding({'type': 'rope_axial', 'thetta': 10.0}, dim=64, num_heads=4)


@pytest.mark.parametrize('name', ENCODINGS)
def test_forward_backward_fp32_and_bf16(name):
    # average pooling: with cls-token pooling the last block's patch outputs are unused, so a value-term
    # encoding there (lepe) rightly gets no gradient
    model = tiny_model(name, global_pool='avg')
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    out.square().sum().backward()
    for pname, p in model.named_parameters():
        if '.pe.' in f'.{pname}':
            assert p.grad is not None and p.grad.abs().sum() > 0, f'no gradient reaches {pname}'
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out16 = model(x)
    assert out16.dtype == torch.bfloat16 and torch.isfinite(out16.float()).all()
    out16.float().sum().backward()
    assert (out16.float() - out).abs().max() < 0.25  # same function, lower precision


@pytest.mark.parametrize('name', ENCODINGS)
def test_state_dict_round_trip(name):
    model = tiny_model(name).eval()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(123)
    fresh = tiny_model(name).eval()
    x = torch.randn(2, 3, 32, 32)
    assert not torch.allclose(fresh(x), model(x))  # a different init gives a different function
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(fresh(x), model(x))


@pytest.mark.parametrize('name', ENCODINGS)
@pytest.mark.parametrize('size', [(48, 48), (64, 32), (24, 56)])
def test_runs_at_new_resolutions(name, size):
    model = tiny_model(name).eval()
    out = model(torch.randn(1, 3, *size))
    assert out.shape == (1, 5) and torch.isfinite(out).all()
    feats = model.forward_intermediates(torch.randn(1, 3, *size), indices=1, intermediates_only=True)
    assert feats[0].shape == (1, 64, size[0] // 8, size[1] // 8)


def test_no_encoding_tables_in_checkpoints():
    """Grid-derived tables (sin-cos, rotary) are caches, not state."""
    for name in ('ape_sincos', 'rope_axial'):
        model = tiny_model(name)
        model(torch.randn(1, 3, 32, 32))
        assert not [k for k in model.state_dict() if '.pe.' in f'.{k}'], name


def logits(enc, q, k, pos):
    """Patch-to-patch logits (prefix tokens are unrotated, so their logits with patches are absolute)."""
    q2, k2 = enc.rotate(q, k, pos)
    n = pos.num_prefix
    return q2[..., n:, :] @ k2[..., n:, :].transpose(-1, -2)


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed'])
def test_rotary_logits_depend_only_on_offsets(name):
    enc = vispe.build_encoding(name, dim=64, num_heads=4)
    if name == 'rope_mixed':  # a trained-looking, non-axis-aligned frequency set
        torch.nn.init.normal_(enc.freqs, std=0.5)
    q, k = torch.randn(2, 4, 5 + 12, 16), torch.randn(2, 4, 5 + 12, 16)
    base = grid_positions(3, 4, num_prefix=5)
    ref = logits(enc, q, k, base)
    for offset in ([3.0, -7.0], [0.25, 11.5]):
        shifted = Positions(base.coords + torch.tensor(offset), grid=(3, 4), num_prefix=5)
        torch.testing.assert_close(logits(enc, q, k, shifted), ref, atol=1e-4, rtol=1e-4)
    # the property can fail: scaling positions (not a shift) changes the logits
    scaled = Positions(base.coords * 2, grid=(3, 4), num_prefix=5)
    assert (logits(enc, q, k, scaled) - ref).abs().max() > 1e-2


def test_rotary_leaves_prefix_tokens_untouched():
    enc = vispe.build_encoding('rope_axial', dim=64, num_heads=4)
    q, k = torch.randn(1, 4, 2 + 9, 16), torch.randn(1, 4, 2 + 9, 16)
    q2, k2 = enc.rotate(q, k, grid_positions(3, 3, num_prefix=2))
    torch.testing.assert_close(q2[:, :, :2], q[:, :, :2])
    assert not torch.allclose(q2[:, :, 3:], q[:, :, 3:])


def test_rope_axial_frequencies_follow_the_paper():
    enc = vispe.build_encoding('rope_axial', dim=64, num_heads=4)  # d = 16, theta = 100
    d = 16
    torch.testing.assert_close(enc.freqs, torch.tensor([1 / 100 ** (4 * k / d) for k in range(d // 4)]))


def test_ape_sincos_is_a_pure_function_of_position():
    enc = vispe.build_encoding('ape_sincos', dim=64)
    x = torch.zeros(1, 12, 64)
    small = enc.embed(x, grid_positions(3, 4))
    large = enc.embed(torch.zeros(1, 30, 64), grid_positions(5, 6))
    # token (r, c) gets the same vector in both grids
    torch.testing.assert_close(small[0].reshape(3, 4, 64)[2, 3], large[0].reshape(5, 6, 64)[2, 3])


def test_grid_tables_are_cached_per_grid_device_and_dtype():
    """One build per (grid, prefix count, device, dtype): a repeated forward reuses the table, a new grid or a bf16
    input builds its own (in that dtype), and the float32 entry stays."""
    enc = vispe.build_encoding('ape_sincos', dim=16)
    pos = grid_positions(3, 4)
    out32 = enc.embed(torch.zeros(1, 12, 16), pos)
    assert len(enc._cache._tables) == 1
    enc.embed(torch.zeros(1, 12, 16), grid_positions(3, 4))
    assert len(enc._cache._tables) == 1
    out16 = enc.embed(torch.zeros(1, 12, 16, dtype=torch.bfloat16), pos)
    enc.embed(torch.zeros(1, 20, 16), grid_positions(4, 5))
    assert len(enc._cache._tables) == 3 and out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.float(), out32, atol=1e-2, rtol=0)
    rope = vispe.build_encoding('rope_axial', dim=16, num_heads=1)
    q = torch.randn(1, 1, 12, 16)
    rope.rotate(q, q, pos)
    rope.rotate(q.bfloat16(), q.bfloat16(), pos)  # rotary tables are float32 for every input dtype: one entry
    assert len(rope._cache._tables) == 1


@pytest.mark.parametrize('strategy', ['bicubic', 'bilinear', 'nearest'])
def test_ape_learned_resamples_to_new_grids(strategy):
    enc = vispe.build_encoding('ape_learned', dim=8, grid_size=(4, 4))
    enc.strategy = strategy
    table = enc.table((8, 8))
    assert table.shape == (1, 64, 8)
    assert torch.equal(enc.table((4, 4)), enc.pos_embed)
    with pytest.raises(ValueError, match='choose one of'):
        enc.strategy = 'lanczos'
