"""Model arguments and inputs that once failed deep inside timm or a layer, or trained silently: image and patch
sizes that are not sizes, two rotary encodings together, and inputs of another dtype than the model's. Each is
refused with one line naming what is wrong and the fix; the legitimate cases keep working."""

from __future__ import annotations

import re

import pytest
import torch
from mmengine.config import Config
from test_bad_configs import dit, multiview, point, run_dit, run_multiview, run_point, run_vit, vit
from test_compile import model_and_inputs

import vispe
from vispe.registry import MODELS

ROOT_CONFIGS = 'configs'


# --- img_size / patch_size that are not sizes --------------------------------------------------------------------
NOT_A_SIZE = ['abc', 32.0, 0, -32, (32, 32, 3), (32,), (32, 'x'), True, None]


@pytest.mark.parametrize('value', NOT_A_SIZE, ids=repr)
@pytest.mark.parametrize(
    ('build', 'label'),
    [
        (lambda v: vit(img_size=v), 'VisionTransformerPE'),
        (lambda v: vispe.create_model('vit_tiny_patch16_224', img_size=v), 'VisionTransformerPE'),
        (lambda v: vispe.VisionTransformerPE(img_size=v, depth=1), 'VisionTransformerPE'),
        (lambda v: dit(img_size=v), 'DiT'),
        (lambda v: multiview(img_size=v), 'MultiViewTransformer'),
    ],
    ids=['create_model', 'create_model-defaults', 'VisionTransformerPE', 'DiT', 'MultiViewTransformer'],
)
def test_img_size_that_is_not_a_size_is_refused_at_build(build, label, value):
    with pytest.raises(ValueError) as error:
        build(value)
    message = str(error.value)
    assert message == (f'{label}: img_size must be an int or (H, W) of positive ints, got img_size={value!r}'), message


@pytest.mark.parametrize('value', ['abc', 4.0, 0, (4, 4, 1), None], ids=repr)
def test_vit_patch_size_that_is_not_a_size_is_refused_at_build(value):
    expected = f'VisionTransformerPE: patch_size must be an int or (H, W) of positive ints, got patch_size={value!r}'
    with pytest.raises(ValueError, match=f'^{re.escape(expected)}$'):
        vit(patch_size=value)


@pytest.mark.parametrize('value', ['abc', 4.5, 0, (4, 4)], ids=repr)
@pytest.mark.parametrize(('build', 'label'), [(dit, 'DiT'), (multiview, 'MultiViewTransformer')])
def test_dit_and_multiview_patch_size_is_one_positive_int(build, label, value):
    """Their patchify and view grids take one square patch side."""
    with pytest.raises(ValueError) as error:
        build(patch_size=value)
    assert str(error.value) == f'{label}: patch_size must be a positive int, got patch_size={value!r}'


def test_img_size_abc_through_cfg_options_is_refused_naming_it():
    cfg = Config.fromfile(f'{ROOT_CONFIGS}/vit/vit_tiny_irpe_shapes2d_position.py')
    cfg.merge_from_dict({'model.backbone.img_size': 'abc'})
    with pytest.raises(ValueError, match=r"img_size must be an int or \(H, W\) of positive ints, got img_size='abc'"):
        MODELS.build(cfg.model)


@pytest.mark.parametrize('size', [32, (32, 48), [32, 48]], ids=repr)
def test_valid_sizes_still_build(size):
    h, w = (size, size) if isinstance(size, int) else size
    model = vit(img_size=size)
    assert model.patch_embed.img_size == (h, w) and run_vit(model).shape == (1, 5)
    assert dit(img_size=size).grid_size == (h // 4, w // 4)
    assert multiview(img_size=size).patch_embed.img_size == (h, w)


# --- two rotary encodings ------------------------------------------------------------------------------------------
def rotary_encodings(names):
    from vispe.backbones.base import rotary_encodings as derived

    return derived(names)


def test_rotary_is_derived_from_the_rotate_hook():
    rotary = rotary_encodings(vispe.list_encodings())
    expected = {'rope_axial', 'rope_mixed', 'rope_dinov3', 'comrope_ap', 'comrope_ld', 'harope', 'gta', 'rope3d'}
    expected |= {'liere', 'string_cayley', 'string_circulant', 'prope', 'mrope', 'videorope', 'vrope'}
    assert expected == set(rotary)


def test_the_video_backbone_refuses_two_rotations_too():
    from vispe.backbones import VideoTransformer

    with pytest.raises(
        ValueError, match=r"^VideoTransformer: mrope cannot be combined with \['rope_axial'\]: .*pick one"
    ):
        VideoTransformer(encoding=['mrope', 'rope_axial', 'ape_learned'], embed_dim=48, num_heads=2, depth=1)


@pytest.mark.parametrize(
    ('build', 'names', 'label'),
    [
        (vit, ['rope_axial', 'rope_mixed'], 'VisionTransformerPE'),
        (vit, ['ape_learned', 'comrope_ap', 'rope_axial'], 'VisionTransformerPE'),
        (dit, ['harope', 'rope_mixed'], 'DiT'),
        (point, ['rope3d', dict(type='point_mlp')], None),  # one rotation: accepted
        (multiview, ['gta', 'rope_axial'], 'MultiViewTransformer'),
    ],
)
def test_two_rotations_of_the_same_channels_are_refused_at_build(build, names, label):
    rotary = [n for n in names if isinstance(n, str) and n in rotary_encodings(vispe.list_encodings())]
    if label is None:
        build(names)
        return
    with pytest.raises(ValueError) as error:
        build(names)
    message = str(error.value)
    first, rest = rotary[0], rotary[1:]
    assert message.startswith(f'{label}: {first} cannot be combined with {rest}: '), message
    assert 'pick one' in message and '\n' not in message


def test_apply_encoding_refuses_two_rotations_too():
    model = vit('ape_learned')
    with pytest.raises(ValueError, match=r"rope_mixed cannot be combined with \['rope_axial'\].*pick one"):
        vispe.apply_encoding(model, ['rope_mixed', 'rope_axial'])


@pytest.mark.parametrize(
    ('build', 'run', 'names'),
    [
        (vit, run_vit, ['rope_mixed', 'peg']),
        (vit, run_vit, ['irpe', 'ape_learned']),
        (vit, run_vit, ['rope_axial', 'lepe', 'ape_sincos']),
        (dit, run_dit, ['rope_axial', 'irpe']),
        (point, run_point, ['rope3d', 'point_mlp']),
        (multiview, run_multiview, ['gta', dict(type='plucker', relative=True)]),
        (multiview, run_multiview, ['rope_axial', 'plucker']),
    ],
)
def test_legitimate_combinations_stay_accepted(build, run, names):
    assert torch.isfinite(run(build(names))).all()


def test_the_gta_plucker_config_builds():
    cfg = Config.fromfile(f'{ROOT_CONFIGS}/camera/multiview_tiny_gta_plucker_scenes.py')
    MODELS.build(cfg.model)


# --- inputs of another dtype than the model's ----------------------------------------------------------------------
def backbone_and_inputs(kind: str):
    if kind == 'DiT':
        model = dit()
        return model, (torch.randn(2, 3, 16, 16), torch.tensor([10.0, 20.0]), torch.tensor([1, 2]))
    name = {'VisionTransformerPE': 'rope_axial', 'MultiViewTransformer': 'plucker', 'PointTransformer': 'rope3d'}[kind]
    return model_and_inputs(name)


KINDS = ['VisionTransformerPE', 'DiT', 'PointTransformer', 'MultiViewTransformer']


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize('kind', KINDS)
def test_input_of_another_dtype_is_refused_at_the_backbone_input(kind, dtype):
    model, inputs = backbone_and_inputs(kind)
    x, *rest = inputs
    with pytest.raises(ValueError) as error:
        model.eval()(x.to(dtype), *rest)
    message = str(error.value)
    assert message.startswith(f'{kind}: the input is {dtype} but the model is torch.float32: '), message
    assert 'cast the input' in message and '.float()' in message and 'cast the model' in message
    assert '--amp' in message and 'torch.autocast' in message and '\n' not in message


@pytest.mark.parametrize('kind', ['VisionTransformerPE', 'PointTransformer'])
def test_integer_input_is_refused_naming_the_conversion(kind):
    model, (x, *rest) = backbone_and_inputs(kind)
    with pytest.raises(ValueError, match=rf'^{kind}: the input is torch.uint8 but the model is torch.float32: .*float'):
        model.eval()((x * 100).to(torch.uint8), *rest)


@pytest.mark.parametrize('dtype', [torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize('kind', KINDS)
def test_mixed_dtypes_work_under_autocast(kind, dtype):
    """Autocast casts a float16 input itself; float64 is not autocast's to cast, but float32 weights meet it in
    bf16, so only float32 / lower-precision inputs are let through."""
    model, (x, *rest) = backbone_and_inputs(kind)
    model.eval()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        if dtype == torch.float64:
            with pytest.raises(ValueError, match='the input is torch.float64 but the model is torch.float32'):
                model(x.to(dtype), *rest)
            return
        out = model(x.to(dtype), *rest)
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize('kind', KINDS)
def test_a_cast_model_takes_its_own_dtype(kind, dtype):
    model, inputs = backbone_and_inputs(kind)
    model.eval()
    with torch.no_grad():
        ref = model(*inputs)
        out = model.to(dtype)(*[t.to(dtype) if t.is_floating_point() else t for t in inputs])
    assert out.dtype == dtype
    tolerance = 1e-6 if dtype == torch.float64 else 0.1
    torch.testing.assert_close(out.float(), ref, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_float16_input_under_bf16_autocast_for_every_encoding(name):
    """Every encoding in the backbone that serves it (rope3d once failed: CPU autocast cannot promote float16)."""
    model, (x, *rest) = model_and_inputs(name)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        out = model.eval()(x.half(), *rest)
    assert torch.isfinite(out.float()).all()


# --- bf16 patch embedding of one-column grids (a oneDNN fault of torch 2.14 on CPU) -------------------------------
@pytest.mark.parametrize('shape', [(80, 2), (14, 2), (80, 3), (2, 80), (12, 12)])
def test_patch_conv_in_bf16_matches_float32_on_one_column_grids(shape):
    """Before: a 40 x 1 grid of 2 px patches came out of bf16 nn.Conv2d off by up to 3 (float32 scale 1), or NaN,
    which test_fuzz found now and then; PatchConv2d keeps every shape within bf16 rounding."""
    from vispe.backbones.common import PatchConv2d

    plain = torch.nn.Conv2d(3, 64, 2, 2)
    patch = PatchConv2d(3, 64, 2, 2)
    patch.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, *shape)
    with torch.no_grad():
        ref = plain(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = patch(x)
        cast = patch.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert out.shape == ref.shape and cast.shape == ref.shape
    torch.testing.assert_close(out.float(), ref, atol=0.05, rtol=0.02)
    torch.testing.assert_close(cast.float(), ref, atol=0.05, rtol=0.02)


def test_every_backbone_embeds_patches_with_the_workaround():
    from vispe.backbones.common import PatchConv2d

    model = vispe.create_model('vit_tiny_patch16_224', encoding='ape_sincos', img_size=32, patch_size=2, num_classes=3)
    dit_model = MODELS.build(dict(type='DiT', img_size=8, patch_size=2, depth=1, embed_dim=32, num_heads=2))
    mv = MODELS.build(dict(type='MultiViewTransformer', img_size=16, patch_size=4, depth=1, embed_dim=32, num_heads=2))
    for proj in (model.patch_embed.proj, dit_model.x_embedder.proj, mv.patch_embed.proj):
        assert type(proj) is PatchConv2d
    assert 'patch_embed.proj.weight' in model.state_dict()
    x = torch.randn(1, 3, 80, 2)
    with torch.no_grad():
        ref = model.eval()(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = model(x)
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.05)


def test_patch_conv_stays_traceable_and_scriptable():
    """The workaround reads the input's shape, which FX and TorchScript cannot branch on: both get the plain
    convolution, equal to nn.Conv2d (timm's forward_fx / torchscript contracts)."""
    from vispe.backbones.common import PatchConv2d

    plain = torch.nn.Conv2d(3, 8, 4, 4)
    patch = PatchConv2d(3, 8, 4, 4)
    patch.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 16, 12)
    for converted in (torch.fx.symbolic_trace(patch), torch.jit.script(patch)):
        torch.testing.assert_close(converted(x), plain(x))
