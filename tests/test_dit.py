"""DiT: adaLN-Zero init, any grid, conditioning (labels, null class, crop), encodings and strategies, registry."""

import pytest
import torch
from mmengine.registry import init_default_scope

from vispe.backbones.base import build_backbone_encodings
from vispe.backbones.dit import DIT_SIZES, DiT, dit, patchify, unpatchify
from vispe.encodings.base import Encoding
from vispe.evaluation.trained_model import available_strategies, set_strategy
from vispe.registry import MODELS

# 32 px, patch 4: an 8x8 grid; head dim 16 suits every encoding (comrope_ap needs a multiple of 8)
TINY = dict(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10)
ENCODINGS = (
    'ape_sincos',
    'loope',
    'rope_axial',
    'rope_mixed',
    'harope',
    'comrope_ap',
    'comrope_ld',
    'string_cayley',
    'string_circulant',
    'liere',
)
ROTARY = ('rope_axial', 'rope_mixed', 'harope')


def tiny(**overrides):
    return DiT(**{**TINY, **overrides})


def inputs(batch=2, size=(32, 32), chans=3):
    x = torch.randn(batch, chans, *size)
    return x, torch.rand(batch) * 1000, torch.randint(0, TINY['num_classes'], (batch,))


def perturb(model, std=0.05):
    """Move every parameter away from DiT's zero init so that outputs depend on everything."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * std)
    return model


@pytest.mark.parametrize('encoding', ['ape_sincos', 'rope_mixed', 'comrope_ld', ['rope_axial', 'peg']])
def test_output_is_exactly_zero_at_init_and_blocks_are_identity(encoding):
    model = tiny(encoding=encoding, learn_sigma=True).eval()
    x, t, y = inputs()
    out = model(x, t, y)
    assert out.shape == (2, 6, 32, 32)
    assert torch.count_nonzero(out) == 0
    tokens, pos = model.tokens(x)
    c = model.condition(t, y, None, 2)
    for blk in model.blocks:  # adaLN-Zero: gates start at 0, so each block passes its input through
        torch.testing.assert_close(blk(tokens, pos, c), tokens, rtol=0, atol=0)


def test_patchify_round_trip_on_non_square_grids():
    x = torch.randn(2, 3, 24, 40)
    tokens = patchify(x, 4)
    assert tokens.shape == (2, 6 * 10, 4 * 4 * 3)
    assert torch.equal(unpatchify(tokens, 4, (6, 10)), x)
    # token (r, c) holds exactly the pixels of patch (r, c)
    torch.testing.assert_close(tokens[0, 1 * 10 + 7].reshape(4, 4, 3), x[0, :, 4:8, 28:32].permute(1, 2, 0))


def test_runs_on_non_square_input():
    model = perturb(tiny(encoding='rope_axial')).eval()
    x, t, y = inputs(size=(24, 40))
    out = model(x, t, y)
    assert out.shape == x.shape and out.abs().sum() > 0


def test_size_not_divisible_by_patch():
    model = tiny()
    with pytest.raises(ValueError, match=r'30x32 is not divisible by the patch size 4x4.*32x32'):
        model(*inputs(size=(30, 32)))
    with pytest.raises(ValueError, match='patch_size'):
        DiT(img_size=30, patch_size=4)


def test_label_dropout_and_null_class():
    model = perturb(tiny(class_dropout_prob=1.0))
    x, t, y = inputs()
    null = torch.full_like(y, TINY['num_classes'])
    model.train()
    dropped = model(x, t, y)
    torch.testing.assert_close(dropped, model(x, t, null))
    torch.testing.assert_close(dropped, model(x, t, None))
    model.eval()  # no dropout: labels matter
    assert not torch.allclose(model(x, t, y), model(x, t, null))
    torch.testing.assert_close(model(x, t, null), dropped)


def test_crop_condition():
    x, t, y = inputs()
    crop = torch.tensor([[0.1, 0.2, 0.5, 0.5], [0.0, 0.0, 0.25, 1.0]])
    model = tiny(crop_condition=True)
    with torch.no_grad():  # perturb everything but the crop embedder, which keeps its init
        for name, p in model.named_parameters():
            if not name.startswith('crop_embedder'):
                p.add_(torch.randn_like(p) * 0.05)
    model.eval()
    assert model(x, t, y).abs().sum() > 0
    torch.testing.assert_close(model(x, t, y, crop), model(x, t, y))  # zero-init last layer: no effect yet
    perturb(model.crop_embedder)
    assert not torch.allclose(model(x, t, y, crop), model(x, t, y), atol=1e-4)
    full = torch.tensor([[0.0, 0.0, 1.0, 1.0]]).expand(2, 4)  # crop=None is the full image
    torch.testing.assert_close(model(x, t, y, full), model(x, t, y))


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_encodings_train_and_run_at_unseen_resolution(encoding):
    model = perturb(tiny(encoding=encoding))
    assert model.encoding_names == [encoding] and all(isinstance(e, Encoding) for _, e in model.encodings())
    for size in ((32, 32), (48, 48)):
        model.zero_grad()
        x, t, y = inputs(size=size)
        out = model(x, t, y)
        assert out.shape == x.shape
        out.square().mean().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
    if encoding in ROTARY:
        assert available_strategies(model) == ['none', 'interpolate', 'ntk', 'yarn']
        model.eval()
        x, t, y = inputs(size=(48, 48))
        outs = {}
        for strategy in ('none', 'interpolate', 'ntk', 'yarn'):
            set_strategy(model, strategy)
            outs[strategy] = model(x, t, y)
            assert torch.isfinite(outs[strategy]).all()
        assert not torch.allclose(outs['none'], outs['interpolate'])  # the training grid (8x8) reached them
    if encoding == 'loope':
        assert available_strategies(model) == ['interpolate', 'extend']
        model.eval()
        x, t, y = inputs(size=(48, 48))
        outs = {}
        for strategy in ('interpolate', 'extend'):
            set_strategy(model, strategy)
            outs[strategy] = model(x, t, y)
        assert not torch.allclose(outs['interpolate'], outs['extend'])  # the index scaled by the trained 8x8 grid


def test_rpe2d_randomises_training_positions_only():
    model = perturb(tiny(encoding='rope_axial', position_sampler=dict(type='rpe2d', max_grid=(16, 16))))
    x, t, y = inputs()
    model.y_embedder.dropout_prob = 0.0  # the only other randomness in training
    model.train()
    assert not torch.allclose(model(x, t, y), model(x, t, y))
    model.eval()
    assert torch.equal(model(x, t, y), model(x, t, y))


def test_presets():
    model = dit('DiT-Ti/4', num_classes=10, img_size=32)
    assert (model.embed_dim, len(model.blocks), model.patch_size) == (128, 4, 4)
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    assert set(DIT_SIZES) >= {'S', 'B', 'L', 'XL'} and DIT_SIZES['XL'] == dict(embed_dim=1152, depth=28, num_heads=16)
    with pytest.raises(ValueError, match='DiT-XL/2'):
        dit('DiT-M/2')


def test_registry():
    init_default_scope('vispe')
    model = MODELS.build(dict(type='DiT', **TINY, encoding='rope_mixed'))
    assert isinstance(model, DiT) and 'rope_mixed' in model.blocks[1].attn.pe
    preset = MODELS.build(dict(type='dit_preset', name='DiT-Ti/4', num_classes=10))
    assert isinstance(preset, DiT) and preset.patch_size == 4


def test_build_backbone_encodings_splits_levels():
    model_level, per_layer = build_backbone_encodings(['rope_mixed', 'peg'], 64, 4, 3, (8, 8))
    assert list(model_level) == ['peg'] and len(per_layer) == 3
    assert all(list(d) == ['rope_mixed'] for d in per_layer)
    assert per_layer[0]['rope_mixed'] is not per_layer[1]['rope_mixed']
    assert per_layer[0]['rope_mixed'].train_grid == (8, 8)


def test_lape_reaches_every_dit_block():
    """LaPE (``lape=True``) in the DiT: one LayerNorm per block, each of them trained (its attention reads
    LN'_l(P) after the adaLN modulation), and with the position table taken out of the token stream."""
    model = perturb(tiny(encoding=dict(type='ape_sincos', lape=True)))
    norms = model.pe['ape_sincos'].lape_norms
    assert len(norms) == len(model.blocks)
    x, t, y = inputs()
    model(x, t, y).square().mean().backward()
    assert all(n.weight.grad is not None and n.weight.grad.abs().sum() > 0 for n in norms)
    plain = perturb(tiny(encoding='ape_sincos'))
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if 'lape_norms' not in k})
    assert not torch.allclose(model(x, t, y), plain(x, t, y), atol=1e-4)  # P enters per block, not once
