"""vispe's timm names keep timm's contracts: their own pretrained configs, features, round trips, strict loading.

These mirror what timm's own tests/test_models.py checks (tools/timm_model_tests.py runs that file itself), so CI
catches a regression without a timm checkout.
"""

import json
import math
import warnings

import pytest
import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, resolve_data_config

import vispe
from vispe.backbones.timm_interop import names as vispe_names
from vispe.engine.checkpoint import CheckpointError

ENCODINGS = vispe.list_encodings(ndim=2)
#: small enough to build every encoding in a second
SMALL = dict(depth=2)


def tiny_name(enc):
    return f'vit_tiny_patch16_{enc}_224'


def test_every_vispe_name_has_its_own_pretrained_config():
    assert set(timm.list_models(module='vispe_vit')) == set(vispe.TIMM_NAMES)
    with_cfg = set(timm.list_models(name_matches_cfg=True))  # what timm's backward / torchscript / fx tests collect
    for name in vispe.TIMM_NAMES:
        cfg = timm.get_pretrained_cfg(name)
        assert cfg.architecture == name and name in with_cfg
        assert not (cfg.hf_hub_id or cfg.url or cfg.file), f'{name} names weights it does not have'
        assert (cfg.mean, cfg.std, cfg.crop_pct, cfg.interpolation) == (
            IMAGENET_DEFAULT_MEAN,
            IMAGENET_DEFAULT_STD,
            1.0,
            'bilinear',
        )
        assert cfg.num_classes == 1000 and cfg.input_size == (3, 224, 224) and not cfg.fixed_input_size
    assert not set(timm.list_pretrained()) & set(vispe.TIMM_NAMES), 'timm would try to download weights'


@pytest.mark.parametrize('enc', ENCODINGS)
def test_built_model_describes_itself(enc):
    model = timm.create_model(tiny_name(enc), img_size=(64, 96), num_classes=7, **SMALL)
    cfg = model.pretrained_cfg
    assert cfg is model.default_cfg and cfg['architecture'] == tiny_name(enc)
    assert cfg['input_size'] == (3, 64, 96) and cfg['num_classes'] == 7
    data = resolve_data_config(model=model)
    assert data['input_size'] == (3, 64, 96) and data['crop_pct'] == 1.0 and data['interpolation'] == 'bilinear'
    # timm's default_cfgs_non_std contract
    assert model.num_features == model.head_hidden_size == 192
    state = model.state_dict()
    assert f'{cfg["classifier"]}.weight' in state and f'{cfg["first_conv"]}.weight' in state
    x = torch.randn(1, 3, 64, 96)
    feats = model.forward_features(x)
    assert feats.shape[-1] == model.num_features
    assert model.forward_head(feats, pre_logits=True).shape == (1, model.head_hidden_size)
    model.reset_classifier(0)
    assert model.num_classes == 0 and model(x).shape == (1, model.head_hidden_size)


def test_converted_timm_vits_carry_a_config_of_their_own():
    model = vispe.create_model('vit_tiny_patch16_224', encoding='irpe', img_size=32, num_classes=3, **SMALL)
    cfg = model.pretrained_cfg
    assert cfg['architecture'] == 'vit_tiny_patch16_irpe_224', 'the converted model kept the timm model config'
    assert not cfg.get('hf_hub_id') and cfg['input_size'] == (3, 32, 32) and cfg['num_classes'] == 3
    assert cfg['crop_pct'] == 1.0  # vispe's pipeline: not timm's ViT crop 0.9
    other = vispe.create_model('vit_base_patch32_224', encoding=['rope_axial', 'peg'], **SMALL)
    assert other.pretrained_cfg['architecture'] == 'vit_base_patch32_224' and not other.pretrained_cfg.get('hf_hub_id')
    assert other._model_args['encoding'] == [{'type': 'rope_axial'}, {'type': 'peg'}]


@pytest.mark.parametrize('feature_cls', ['getter', 'hook', 'fx'])
def test_features_only_carries_the_config_and_honours_feature_cls(feature_cls):
    model = timm.create_model(tiny_name('rope_mixed'), features_only=True, feature_cls=feature_cls, depth=3)
    cfg = model.pretrained_cfg
    assert cfg['architecture'] == tiny_name('rope_mixed') and cfg['crop_pct'] == 1.0 and 'num_classes' not in cfg
    assert resolve_data_config(model=model)['crop_pct'] == 1.0  # not timm's fallback 0.875
    outs = model(torch.randn(1, 3, 64, 48))
    want = (1, 192, 4, 3) if feature_cls == 'getter' else (1, 1 + 12, 192)  # hook, fx: the blocks' raw tokens
    assert [tuple(o.shape) for o in outs] == [want] * 3  # the last three blocks, as timm's ViTs
    via_vispe = vispe.create_model(tiny_name('rope_mixed'), features_only=True, feature_cls=feature_cls, depth=3)
    assert via_vispe.pretrained_cfg['architecture'] == tiny_name('rope_mixed')


@pytest.mark.parametrize('feature_cls', ['list', 'dict', 'nonsense'])
def test_unsupported_feature_cls_is_refused(feature_cls):
    with pytest.raises(ValueError, match=r"feature_cls \['getter', 'hook', 'fx'\]"):
        timm.create_model(tiny_name('irpe'), features_only=True, feature_cls=feature_cls, **SMALL)


@pytest.mark.parametrize('enc', ENCODINGS)
def test_forward_intermediates_features_contract(enc):
    """timm's test_model_forward_intermediates_features and _intermediates on every encoding."""
    model = timm.create_model(tiny_name(enc), features_only=True, feature_cls='getter', depth=3).eval()
    x = torch.randn(1, 3, 96, 64)
    outs = model(x)
    for channels, reduction, out in zip(model.feature_info.channels(), model.feature_info.reduction(), outs):
        assert out.shape[1] == channels
        assert out.shape[2] <= math.ceil(96 / reduction) + 1 and out.shape[3] <= math.ceil(64 / reduction) + 1
    assert len(outs) == 3
    full = timm.create_model(tiny_name(enc), depth=3).eval()
    final, inter = full.forward_intermediates(x)
    assert len(inter) == len(full.feature_info) == 3
    torch.testing.assert_close(final, full.forward_features(x))


@pytest.mark.parametrize('enc', ENCODINGS)
def test_backward_reaches_every_parameter(enc):
    """timm's test_model_backward: batch 2, num_classes 42, a gradient for every parameter."""
    model = timm.create_model(tiny_name(enc), num_classes=42, **SMALL).train()
    out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 42)
    out.mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize('enc', ENCODINGS)
def test_save_for_hf_round_trip_rebuilds_the_same_model(enc, tmp_path):
    model = timm.create_model(tiny_name(enc), num_classes=5, img_size=64, **SMALL).eval()
    timm.models.save_for_hf(model, tmp_path)
    config = json.loads((tmp_path / 'config.json').read_text())
    assert config['architecture'] == tiny_name(enc) and config['pretrained_cfg']['fixed_input_size'] is False
    again = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    assert type(again) is vispe.VisionTransformerPE and again.encoding_names == model.encoding_names
    x = torch.randn(2, 3, 48, 80)
    assert torch.equal(again(x), model(x))


def test_round_trip_of_converted_models_with_options(tmp_path):
    spec = [dict(type='irpe', mode='bias'), 'peg']
    model = vispe.create_model('vit_tiny_patch16_224', encoding=spec, num_classes=3, **SMALL).eval()
    timm.models.save_for_hf(model, tmp_path / 'a')
    again = timm.create_model(f'local-dir:{tmp_path / "a"}', pretrained=True).eval()
    assert again.blocks[0].attn.pe['irpe'].mode == 'bias', 'the encoding options were lost'
    x = torch.randn(1, 3, 32, 48)
    assert torch.equal(again(x), model(x))
    # a timm name vispe has no name for keeps its own architecture; vispe rebuilds it
    other = vispe.create_model('vit_base_patch32_224', encoding='rope_axial', num_classes=3, **SMALL).eval()
    timm.models.save_for_hf(other, tmp_path / 'b')
    rebuilt = vispe.create_model(f'local-dir:{tmp_path / "b"}', pretrained=True).eval()
    x = torch.randn(1, 3, 64, 96)
    assert torch.equal(rebuilt(x), other(x))


def test_overlay_file_loads_strictly(tmp_path):
    model = timm.create_model(tiny_name('irpe'), num_classes=10, **SMALL).eval()
    torch.save(model.state_dict(), tmp_path / 'w.pth')
    overlay = dict(file=str(tmp_path / 'w.pth'))
    same = timm.create_model(
        tiny_name('irpe'), num_classes=10, pretrained=True, pretrained_cfg_overlay=overlay, **SMALL
    )
    x = torch.randn(2, 3, 48, 64)
    assert torch.equal(same.eval()(x), model(x)), 'a vispe state dict of the same classes must load whole'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        other = timm.create_model(
            tiny_name('irpe'), num_classes=4, pretrained=True, pretrained_cfg_overlay=overlay, **SMALL
        ).eval()
    assert any('classifier head has another number of classes' in str(w.message) for w in caught)
    loaded = other.state_dict()
    for key, value in model.state_dict().items():  # the encoding tables and cls token too
        if not key.startswith('head.'):
            assert torch.equal(loaded[key], value), f'{key} was not restored'
    with pytest.raises(CheckpointError, match=r"missing keys \('blocks.0.attn.pe.rope_mixed.freqs'"):
        timm.create_model(tiny_name('rope_mixed'), pretrained=True, pretrained_cfg_overlay=overlay, **SMALL)
    with pytest.raises(ValueError, match='has no pretrained weights'):
        timm.create_model(tiny_name('irpe'), pretrained=True)


def test_checkpoint_path_takes_mmengine_checkpoints_with_the_backbone_prefix(tmp_path):
    model = vispe.create_model('vit_tiny_patch16_224', encoding='lepe', num_classes=3, **SMALL).eval()
    state = {f'backbone.{k}': v for k, v in model.state_dict().items()}
    torch.save({'meta': {'epoch': 1}, 'state_dict': state}, tmp_path / 'epoch_1.pth')
    loaded = vispe.create_model(
        'vit_tiny_patch16_224', encoding='lepe', num_classes=3, checkpoint_path=str(tmp_path / 'epoch_1.pth'), **SMALL
    )
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(loaded.eval()(x), model(x))
    with pytest.raises(CheckpointError, match='does not fit'):
        vispe.create_model('vit_tiny_patch16_224', encoding='peg', checkpoint_path=str(tmp_path / 'epoch_1.pth'))


def test_entrypoints_live_in_their_own_module():
    assert timm.models.get_arch_name(tiny_name('irpe')) == tiny_name('irpe')
    assert all(timm.models._registry._model_to_module[n] == 'vispe_vit' for n in vispe.TIMM_NAMES)
    assert vispe_names.registered_name('vit_small_patch16_224', 'irpe') == 'vit_small_patch16_irpe_224'


def test_encoding_none_is_a_vispe_model_without_positions():
    model = vispe.create_model('vit_tiny_patch16_224', encoding=None, **SMALL)
    assert type(model) is vispe.VisionTransformerPE and model.encoding_names == [] and model.pos_embed is None
    assert model.pretrained_cfg['architecture'] == 'vit_tiny_patch16_224' and model._model_args['encoding'] == []
