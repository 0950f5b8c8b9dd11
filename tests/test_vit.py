"""The timm integration: conversion keeps weights, timm names, naver RoPE-ViT weights, sizes, intermediates."""

import pytest
import timm
import torch
from conftest import TINY_VIT

import vispe
from vispe.backbones.timm_interop.eva import convert_eva_rope_state_dict


def timm_tiny(**overrides):
    return timm.create_model('vit_tiny_patch16_224', **{**TINY_VIT, **overrides}).eval()


def test_create_model_any_timm_vit_and_lists():
    model = vispe.create_model(
        'vit_small_patch16_224', encoding=['rope_mixed', 'ape_learned'], num_classes=10, img_size=64, depth=2
    )
    assert isinstance(model, timm.models.VisionTransformer)
    assert set(model.encoding_names) == {'rope_mixed', 'ape_learned'}
    assert 'rope_mixed' in model.blocks[1].attn.pe and 'ape_learned' in model.pe
    assert model(torch.randn(1, 3, 64, 48)).shape == (1, 10)


def test_apply_encoding_with_ape_learned_is_the_same_function():
    """timm's learned table (cls entry folded into the cls token) becomes ape_learned: identical outputs."""
    original = timm_tiny()
    converted = vispe.apply_encoding(original, 'ape_learned', copy_model=True).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(converted(x), original(x), atol=1e-5, rtol=1e-5)
    assert type(original) is timm.models.VisionTransformer  # copy_model left it alone


def test_apply_encoding_keeps_every_shared_weight():
    original = timm_tiny()
    before = {k: v.clone() for k, v in original.state_dict().items()}
    converted = vispe.apply_encoding(original, 'rope_axial')  # in place
    assert converted is original and isinstance(converted, vispe.VisionTransformerPE)
    after = converted.state_dict()
    shared = [k for k in before if k not in ('pos_embed', 'cls_token')]
    assert shared and all(torch.equal(before[k], after[k]) for k in shared)
    assert converted.pos_embed is None
    assert converted(torch.randn(1, 3, 40, 24)).shape == (1, 5)


def test_apply_encoding_rejects_other_architectures():
    with pytest.raises(TypeError, match='VisionTransformer'):
        vispe.apply_encoding(torch.nn.Linear(2, 2), 'rope_axial')


def test_image_size_not_divisible_by_patch():
    model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', **TINY_VIT)
    with pytest.raises(ValueError, match=r'33x32 is not divisible by the patch size 8x8.*32x32.*dynamic_img_pad'):
        model(torch.randn(1, 3, 33, 32))
    padded = vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', dynamic_img_pad=True, **TINY_VIT)
    assert padded(torch.randn(1, 3, 33, 30)).shape == (1, 5)


def test_timm_knows_vispe_names():
    for enc in vispe.list_encodings(ndim=2):
        name = f'vit_tiny_patch16_{enc}_224'
        assert name in timm.list_models(), name
    model = timm.create_model('vit_tiny_patch16_ape_sincos_224', **TINY_VIT)
    assert isinstance(model, vispe.VisionTransformerPE) and model.encoding_names == ['ape_sincos']


def test_timm_own_names_are_not_overwritten():
    assert 'vit_small_patch16_rope_224' not in vispe.TIMM_NAMES
    assert 'vit_small_patch16_rope_mixed_224' not in vispe.TIMM_NAMES
    assert type(timm.create_model('vit_small_patch16_rope_224', depth=1)).__name__ == 'Eva'


@pytest.mark.parametrize(
    'name, encodings',
    [
        ('vit_small_patch16_rope_224', ['rope_axial']),
        ('vit_small_patch16_rope_mixed_224', ['rope_mixed']),
        ('vit_small_patch16_rope_mixed_ape_224', ['ape_learned', 'rope_mixed']),
    ],
)
def test_loads_timm_naver_rope_weights(name, encodings):
    """Random-init timm RoPE-ViT: its state dict maps key for key, and the outputs match."""
    kwargs = dict(depth=2, num_classes=7, dynamic_img_size=True)
    eva = timm.create_model(name, **kwargs).eval()
    ours = vispe.create_model(name, **kwargs).eval()
    assert sorted(ours.encoding_names) == sorted(encodings)
    missing, unexpected = ours.load_state_dict(convert_eva_rope_state_dict(eva.state_dict(), ours), strict=True)
    assert not missing and not unexpected
    for size in [(224, 224), (160, 96)]:
        x = torch.randn(2, 3, *size)
        torch.testing.assert_close(ours(x), eva(x), atol=1e-5, rtol=1e-5)


def test_forward_intermediates_contract():
    model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', reg_tokens=2, **TINY_VIT).eval()
    x = torch.randn(2, 3, 32, 48)
    final, inter = model.forward_intermediates(x, indices=[0, 1], return_prefix_tokens=True)
    assert final.shape == (2, 3 + 4 * 6, 64)
    (feat, prefix), _ = inter
    assert feat.shape == (2, 64, 4, 6) and prefix.shape == (2, 3, 64)
    torch.testing.assert_close(final, model.forward_features(x))


def test_features_only_through_timm():
    model = timm.create_model(
        'vit_tiny_patch16_rope_axial_224',
        features_only=True,
        out_indices=(1,),
        **{k: v for k, v in TINY_VIT.items() if k != 'num_classes'},
    )
    (feat,) = model(torch.randn(1, 3, 32, 32))
    assert feat.shape == (1, 64, 4, 4)


def test_the_vit_never_imports_the_timm_interop_package():
    """timm interop is one way: vispe.backbones.timm_interop imports the ViT, never the reverse (not even in a
    function), and the mixed-size path does not import the ViT back."""
    import ast
    import inspect

    from vispe.backbones import mixed_sizes, vit

    def imported(module):
        nodes = ast.walk(ast.parse(inspect.getsource(module)))
        return {n.module for n in nodes if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Import) for a in n.names
        }

    assert not [m for m in imported(vit) if 'timm_interop' in m]
    assert 'vispe.backbones.vit' not in imported(mixed_sizes)
