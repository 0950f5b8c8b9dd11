"""timm's DINOv3 models (timm's Eva class) built by ``vispe.create_model``: timm's weights key for key (one conversion,
strict), the same outputs as timm's model in float32 and float64 at two image sizes, local weights through timm's
``pretrained_cfg_overlay``, the augmentation drawn as timm draws it, and a clear refusal of what cannot be carried."""

from __future__ import annotations

import pytest
import timm
import torch
from conftest import ROOT

import vispe
from vispe.backbones.timm_interop.eva import convert_eva_dinov3_state_dict
from vispe.encodings.dinov3 import RoPEDinoV3

SIZES = [(64, 64), (48, 80)]  # the second not square, neither the model's img_size


def random_eva(name: str, **kwargs) -> torch.nn.Module:
    """timm's model at random init, with its zero-initialised q / v biases and small layer scales made random (a
    mapping that dropped or swapped them would then show)."""
    torch.manual_seed(0)
    eva = timm.create_model(name, **kwargs).eval()
    with torch.no_grad():
        for key, p in eva.named_parameters():
            if key.endswith(('q_bias', 'v_bias', 'gamma_1', 'gamma_2')):
                p.normal_(0.0, 0.5)
    return eva


@pytest.mark.parametrize(
    'name',
    [
        'vit_small_patch16_dinov3',
        'vit_small_patch16_dinov3_qkvb',  # q and v biases
        'vit_small_plus_patch16_dinov3',  # SwiGLU MLP
        'vit_base_patch16_dinov3',
    ],
)
def test_timms_dinov3_weights_load_key_for_key_with_the_same_outputs(name):
    eva = random_eva(name, num_classes=7)
    model = vispe.create_model(name, num_classes=7).eval()
    state = convert_eva_dinov3_state_dict(eva.state_dict(), model.blocks[0].attn.num_heads)
    model.load_state_dict(state, strict=True)  # every key of the conversion is one of the model's, and back
    assert set(model.state_dict()) == set(state)
    assert model.num_prefix_tokens == eva.num_prefix_tokens == 5  # cls and the 4 register (storage) tokens
    assert {type(e).__name__ for e in model.modules() if isinstance(e, RoPEDinoV3)} == {'RoPEDinoV3'}
    # float64: vispe rotates q and k in float32 whatever the model's dtype (vispe.encodings.rope), timm in float64:
    # differences of about 1e-7 remain there, the float32 rounding of q and k
    for dtype, tolerance in [(torch.float32, 2e-4), (torch.float64, 1e-6)]:
        eva.to(dtype)
        model.to(dtype)
        for size in SIZES:
            x = torch.randn(2, 3, *size, dtype=dtype)
            with torch.no_grad():
                torch.testing.assert_close(model(x), eva(x), atol=tolerance, rtol=tolerance)
                torch.testing.assert_close(
                    model.forward_features(x), eva.forward_features(x), atol=tolerance * 10, rtol=tolerance
                )


def test_local_weights_load_through_pretrained_cfg_overlay_and_carry_timms_preprocessing(tmp_path):
    name = 'vit_small_patch16_dinov3_qkvb'
    eva = random_eva(name)
    path = tmp_path / 'dinov3_small.pth'
    torch.save(eva.state_dict(), path)
    model = vispe.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path))).eval()
    x = torch.randn(2, 3, *SIZES[1])
    with torch.no_grad():
        torch.testing.assert_close(model(x), eva(x), atol=2e-4, rtol=2e-4)
    cfg = model.pretrained_cfg
    assert cfg['architecture'] == name and not cfg.get('hf_hub_id') and not cfg.get('url')
    assert (cfg['mean'], cfg['std']) == (eva.pretrained_cfg['mean'], eva.pretrained_cfg['std'])


def test_a_missing_weights_file_is_named_and_a_saved_folder_still_loads(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"file='checkpoints/absent\.pth'\): no such file or folder"):
        vispe.create_model(
            'vit_small_patch16_dinov3', pretrained=True, pretrained_cfg_overlay=dict(file='checkpoints/absent.pth')
        )
    model = vispe.create_model('vit_tiny_patch16_rope_axial_224', img_size=32, patch_size=8, depth=1).eval()
    timm.models.save_for_hf(model, str(tmp_path))  # a folder: vispe's names read its model.safetensors
    back = vispe.create_model(
        'vit_tiny_patch16_rope_axial_224', img_size=32, patch_size=8, depth=1, pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path)),
    ).eval()  # fmt: skip
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), atol=0, rtol=0)


def test_the_augmentation_is_timms_own_in_training():
    """timm's rope_*_coords arguments become rope_dinov3's; from the same seed, training mode draws the same."""
    name = 'vit_small_patch16_dinov3'
    options = dict(rope_shift_coords=0.1, rope_jitter_coords=1.2, rope_rescale_coords=2)
    eva = random_eva(name, **options).train()
    model = vispe.create_model(name, **options).train()
    model.load_state_dict(convert_eva_dinov3_state_dict(eva.state_dict(), 6))
    encodings = [e for e in model.modules() if isinstance(e, RoPEDinoV3)]
    assert {(e.shift, e.jitter, e.rescale) for e in encodings} == {(0.1, 1.2, 2.0)}
    x = torch.randn(2, 3, *SIZES[1])
    torch.manual_seed(5)
    expected = eva.forward_features(x)
    torch.manual_seed(5)
    torch.testing.assert_close(model.forward_features(x), expected, atol=2e-5, rtol=1e-5)
    torch.manual_seed(6)
    assert (model.forward_features(x) - expected).abs().max() > 1e-3  # another draw, other outputs


def test_timms_dinov3_without_augmentation_stays_without():
    model = vispe.create_model('vit_small_patch16_dinov3')
    encodings = [e for e in model.modules() if isinstance(e, RoPEDinoV3)]
    assert len(encodings) == 12 and not any(e.augmented for e in encodings)


@pytest.mark.parametrize(
    ('kwargs', 'part'),
    [
        (dict(qk_norm=True), r'a norm inside attention \(qk_norm'),
        (dict(use_post_norm=True), r'post-norm blocks \(use_post_norm=True\)'),
        (dict(use_abs_pos_emb=True), r'an absolute position table \(use_abs_pos_emb=True\)'),
        (dict(scale_mlp=True), r'a norm inside the MLP \(scale_mlp=True\)'),
        (dict(rope_grid_offset=0.5), r'rope_grid_offset=0.5'),
    ],
)
def test_what_cannot_be_carried_over_is_refused_by_name(kwargs, part):
    with pytest.raises(TypeError, match=part + '.*VisionTransformerPE has no counterpart.*build it without'):
        vispe.create_model('vit_small_patch16_dinov3', **kwargs)


def test_apply_encoding_swaps_the_encoding_and_keeps_every_weight():
    model = vispe.create_model('vit_small_patch16_dinov3', depth=2, num_classes=3).eval()
    with torch.no_grad():  # layer scale 1 rather than its 1e-5 init, so the blocks (and the positions) count
        for name, p in model.named_parameters():
            if name.endswith('.gamma'):
                p.fill_(1.0)
    swapped = vispe.apply_encoding(model, 'rope_mixed', copy_model=True).eval()
    before, after = model.state_dict(), swapped.state_dict()
    assert set(after) - set(before) == {f'blocks.{i}.attn.pe.rope_mixed.freqs' for i in range(2)}
    assert all(torch.equal(before[k], after[k]) for k in before)  # tokens, layer scale, qkv (its pair order) kept
    assert swapped.encoding_names == ['rope_mixed'] and model.encoding_names == ['rope_dinov3']
    x = torch.randn(1, 3, *SIZES[1])
    with torch.no_grad():
        difference = swapped.forward_features(x) - model.forward_features(x)
        assert difference[:, 5:].abs().max() > 1e-2  # the positions now come from rope_mixed


def test_a_saved_dinov3_model_comes_back_through_local_dir(tmp_path):
    model = vispe.create_model('vit_small_patch16_dinov3', depth=2, rope_rescale_coords=1.5).eval()
    timm.models.save_for_hf(model, str(tmp_path))
    back = vispe.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    assert [e.rescale for e in back.modules() if isinstance(e, RoPEDinoV3)] == [1.5, 1.5]
    x = torch.randn(1, 3, *SIZES[0])
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), atol=0, rtol=0)


TINY = dict(img_size=32, patch_size=4, embed_dim=64, depth=4, num_heads=4, mlp_ratio=2.0, num_classes=27)


@pytest.fixture(scope='module')
def fine_tuned(tmp_path_factory):
    """configs/vit/dinov3_tiny_shapes2d_position.py from local DINOv3-format weights (timm's Eva at random init, the
    config's architecture), two Runner iterations."""
    from conftest import train_in_process  # noqa: PLC0415

    tmp = tmp_path_factory.mktemp('dinov3')
    eva = random_eva('vit_small_patch16_dinov3', global_pool='token', **TINY)
    torch.save(eva.state_dict(), tmp / 'weights.pth')
    config = tmp / 'fine_tune.py'
    config.write_text(f"""
_base_ = ['{ROOT}/configs/vit/dinov3_tiny_shapes2d_position.py']
model = dict(backbone=dict(pretrained=True, pretrained_cfg_overlay=dict(file='{tmp / 'weights.pth'}')))
train_dataloader = dict(batch_size=8, dataset=dict(num_samples=16))
val_dataloader = dict(batch_size=16, dataset=dict(num_samples=32))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)]
train_cfg = dict(max_epochs=1, val_interval=1)
""")
    path, checkpoint, init, runner = train_in_process(str(config), str(tmp / 'work'))
    return path, checkpoint, init, convert_eva_dinov3_state_dict(eva.state_dict(), 4)


def test_fine_tuning_from_a_config_starts_from_the_weights_file(fine_tuned):
    from vispe.engine.checkpoint import load_checkpoint

    _, checkpoint, init, weights = fine_tuned
    assert set(init) == {f'backbone.{k}' for k in weights}
    assert all(torch.equal(init[f'backbone.{k}'], v) for k, v in weights.items())
    trained = load_checkpoint(checkpoint)['state_dict']
    assert not torch.equal(trained['backbone.blocks.0.attn.qkv.weight'], init['backbone.blocks.0.attn.qkv.weight'])


def test_eval_resolution_sweeps_both_strategies_and_they_agree_at_the_training_grid(fine_tuned):
    from vispe.engine.config import load_config
    from vispe.sweeps import resolution as R

    config, checkpoint, _, _ = fine_tuned
    results = R.sweep(load_config(config), checkpoint, [32, 64], None, 'cpu', show_progress=False)
    cells = {(r['strategy'], r['resolution']): r['value'] for r in results['results']}
    assert set(cells) == {(s, r) for s in ('none', 'extend') for r in (32, 64)}
    assert cells[('none', 32)] == cells[('extend', 32)]


def test_every_dinov3_name_of_timm_converts_including_those_too_large_for_a_test():
    """Read off timm's model built on the meta device (no memory): the arguments of every DINOv3 size resolve."""
    from vispe.backbones.timm_interop.eva import eva_dinov3_arguments, is_eva_dinov3

    names = [n for n in timm.list_models('*dinov3*') if is_eva_dinov3(n)]
    assert {'vit_7b_patch16_dinov3', 'vit_huge_plus_patch16_dinov3_qkvb', 'vit_large_patch16_dinov3'} <= set(names)
    for name in names:
        eva = timm.create_model(name, device='meta')
        vit, rope = eva_dinov3_arguments(eva)
        assert (vit['embed_dim'], vit['depth'], vit['reg_tokens']) == (eva.embed_dim, len(eva.blocks), 4), name
        assert (vit['mlp_layer'].__name__ == 'SwiGLU') == ('plus' in name or '7b' in name), name
        assert vit['qkv_bias'] == name.endswith('_qkvb') and rope['type'] == 'rope_dinov3', name
