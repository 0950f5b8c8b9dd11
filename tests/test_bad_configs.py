"""Bad configs are refused when the model (or encoding) is built, with a message naming the problem and the fix:
unknown encoding arguments, encodings a backbone cannot serve, image sizes that do not divide into patches and
out-of-range values. Every ``pytest.raises`` wraps the constructor alone, so an error that only a forward pass
would raise fails the test."""

import inspect
import re

import pytest
import torch
from conftest import TINY_VIT
from mmengine.config import Config

import vispe
from vispe.backbones.dit import DiT
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.backbones.point import PointTransformer
from vispe.encodings import build_encoding, encoding_class, list_encodings
from vispe.encodings.build import BACKBONE_CONTEXT
from vispe.engine.config import ConfigError, check_config
from vispe.registry import MODELS, accepted_arguments, check_arguments

DIT = dict(img_size=16, patch_size=4, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10)
POINT = dict(num_classes=3, num_groups=8, group_size=8, embed_dim=48, depth=2, num_heads=2, group_hidden=16)
MULTIVIEW = dict(img_size=16, patch_size=4, embed_dim=64, depth=2, num_heads=4)


def vit(encoding='rope_axial', **kwargs):
    return vispe.create_model('vit_tiny_patch16_224', encoding=encoding, **{**TINY_VIT, **kwargs})


def dit(encoding='ape_sincos', **kwargs):
    return DiT(**{**DIT, 'encoding': encoding, **kwargs})


def point(encoding=None, **kwargs):
    return PointTransformer(**{**POINT, 'encoding': encoding, **kwargs})


def multiview(encoding=None, **kwargs):
    return MultiViewTransformer(**{**MULTIVIEW, 'encoding': encoding, **kwargs})


def run_vit(model, size=32):
    return model.eval()(torch.randn(1, 3, size, size))


def run_dit(model, size=16):
    return model.eval()(torch.randn(1, 3, size, size), torch.tensor([10.0]), torch.tensor([1]))


def run_point(model):
    return model.eval()(torch.randn(2, 32, 3))


def run_multiview(model, size=16, views=2):
    K = torch.tensor([[20.0, 0.0, size / 2], [0.0, 20.0, size / 2], [0.0, 0.0, 1.0]]).expand(1, views, 3, 3)
    poses = torch.eye(4).expand(1, views, 4, 4).clone()
    poses[0, 1, :3, 3] = torch.tensor([0.5, 0.0, 0.0])
    return model.eval()(torch.randn(1, views, 3, size, size), K, poses)


def user_arguments(name: str) -> list:
    params = inspect.signature(encoding_class(name).__init__).parameters
    return [p for p in params if p != 'self' and p not in BACKBONE_CONTEXT]


def context(name: str) -> dict:
    return dict(dim=64, num_heads=4, ndim=encoding_class(name).ndims[0])


# --- 1. unknown arguments --------------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', list_encodings())
def test_unknown_argument_names_the_closest_valid_one(name):
    valid = user_arguments(name)
    if not valid:
        with pytest.raises(TypeError, match=rf"{name} got unknown argument\(s\) 'thetta'.*takes none"):
            build_encoding(dict(type=name, thetta=100.0), **context(name))
        return
    for argument in valid:
        typo = argument + 'x'
        with pytest.raises(TypeError) as error:
            build_encoding({'type': name, typo: 1}, **context(name))
        message = str(error.value)
        assert f"{name} got unknown argument(s) '{typo}'; did you mean '{argument}'" in message
        assert f'valid arguments: {valid}' in message


@pytest.mark.parametrize(
    'build, match',
    [
        (lambda: vit(dict(type='rope_axial', thetta=100.0)), r"rope_axial .* 'thetta'; did you mean 'theta'"),
        (
            lambda: vit(dict(type='irpe', mod='bias')),
            r"irpe .* 'mod'; did you mean 'mode'.*valid arguments: \['meth",
        ),
        (lambda: point(dict(type='rope3d', freq_scal=4.0)), r"rope3d .* 'freq_scal'; did you mean 'freq_scale'"),
        (lambda: multiview(dict(type='plucker', relativ=True)), r"plucker .* 'relativ'; did you mean 'relative'"),
    ],
)
def test_unknown_argument_through_a_backbone(build, match):
    with pytest.raises(TypeError, match=match):
        build()


@pytest.mark.parametrize(
    'cfg, match',
    [
        (dict(type='PointTransformer', num_group=8), r"PointTransformer .* 'num_group'; did you mean 'num_groups'"),
        (
            dict(type='MultiViewTransformer', img_sise=16),
            r"MultiViewTransformer .* 'img_sise'; did you mean 'img_size'",
        ),
        # dit_preset passes **overrides to DiT: the check follows its return annotation there
        (dict(type='dit_preset', name='DiT-Ti/4', deph=2), r"dit_preset .* 'deph'; did you mean 'depth'"),
        # VisionTransformerPE passes **kwargs to timm's VisionTransformer: the check follows its bases there
        (dict(type='VisionTransformerPE', img_sz=32), r"VisionTransformerPE .* 'img_sz'; did you mean 'img_size'"),
        (
            dict(type='PointClassifier', backbne=dict(type='PointTransformer')),
            r"PointClassifier .* 'backbne'; did you mean 'backbone'.*valid arguments: \['backbone'",
        ),
        # the nested backbone config is checked too, when the task builds it
        (
            dict(type='PointClassifier', backbone=dict(type='PointTransformer', **POINT, dept=2)),
            r"PointTransformer .* 'dept'; did you mean 'depth'",
        ),
    ],
)
def test_misspelled_model_argument_names_the_closest_valid_one(cfg, match):
    with pytest.raises(TypeError, match=match):
        MODELS.build(cfg)


def test_misspelled_timm_argument_names_the_closest_valid_one():
    with pytest.raises(TypeError, match=r"vit_tiny_patch16_224 \(VisionTransformer\) .* 'img_sz'; did you mean 'img_s"):
        vit(img_sz=32)
    # the same typo through an ImageClassifier config, whose backbone dict has no type to check beforehand
    backbone = dict(model_name='vit_tiny_patch16_224', **TINY_VIT, embed_dm=32)
    with pytest.raises(TypeError, match=r"'embed_dm'; did you mean 'embed_dim'"):
        MODELS.build(dict(type='ImageClassifier', backbone=backbone))


def test_forwarded_kwargs_that_cannot_be_followed_are_not_checked():
    """A target whose **kwargs lead nowhere a signature shows takes anything, as far as the check can tell: it must
    not refuse arguments the target would accept."""

    def takes_anything(**kwargs):
        return kwargs

    def returns_a_class(depth: int = 1, **kwargs) -> PointTransformer:
        raise AssertionError('not called')

    assert accepted_arguments(takes_anything) is None
    check_arguments(takes_anything, ['whatever'], 'takes_anything')
    assert {'depth', 'num_groups', 'encoding'} <= accepted_arguments(returns_a_class)
    assert accepted_arguments(PointTransformer) == set(inspect.signature(PointTransformer).parameters)


def test_config_check_names_where_the_misspelled_argument_sits():
    """The Runner builds the top-level model through mmengine's registry, which does not check: load_config does,
    before anything is built, and names the path in the config."""
    cfg = Config(dict(model=dict(type='PointClassifier', backbone=dict(type='PointTransformer', num_group=8))))
    with pytest.raises(ConfigError, match=r"^model\.backbone: PointTransformer .* 'num_group'; did you mean 'num_g"):
        check_config(cfg)
    cfg.model.backbone.num_groups = cfg.model.backbone.pop('num_group')
    check_config(cfg)  # the corrected config passes
    cfg.model['data_preprocesor'] = None
    with pytest.raises(ConfigError, match=r"^model: PointClassifier .* did you mean 'data_preprocessor'"):
        check_config(cfg)


@pytest.mark.parametrize(
    'build, match',
    [
        (lambda: vit(dict(type='lff', ndim=4)), r'lff: ndim=4 .* the backbone supplies ndim=2.*remove ndim'),
        (lambda: vit(dict(type='rope_axial', ndim=3)), r'rope_axial: ndim=3 .* supplies ndim=2.*remove ndim'),
        (lambda: multiview(dict(type='plucker', patch_size=3)), r'plucker: patch_size=3 .* supplies patch_size=4'),
    ],
)
def test_arguments_the_backbone_supplies_cannot_be_contradicted(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_grid_size_may_differ_from_the_training_grid():
    """grid_size is the one backbone value a config may set on purpose: a pretrained table's grid, resampled."""
    model = vit(dict(type='ape_learned', grid_size=(3, 3)))
    assert model.pe['ape_learned'].pos_embed.shape[1] == 9
    assert torch.isfinite(model(torch.randn(1, 3, 32, 32))).all()


def test_arguments_equal_to_the_backbone_context_are_accepted():
    assert vit(dict(type='lff', ndim=2)).encoding_names == ['lff']


# --- 2. encodings a backbone cannot serve ----------------------------------------------------------------------------
IMAGE = list_encodings(ndim=2)
BACKBONES = {  # builder, forward, name in the messages, the encodings it accepts
    'vit': (vit, run_vit, 'VisionTransformerPE', IMAGE),
    'dit': (dit, run_dit, 'DiT', IMAGE),
    'point': (point, run_point, 'PointTransformer', list_encodings(ndim=3, grid=False)),
    'multiview': (multiview, run_multiview, 'MultiViewTransformer', multiview_encodings()),
}
REFUSED = [
    ('point', 'peg', 'does not work on 3D positions; for point clouds choose one of'),
    ('point', 'lepe', 'does not work on 3D positions; for point clouds choose one of'),
    ('point', 'irpe', 'does not work on 3D positions; for point clouds choose one of'),
    ('point', 'rope_axial', 'needs its positions on a token grid'),
    ('point', 'gta', 'does not work on 3D positions'),
    ('point', 'plucker', 'does not work on 3D positions'),
    ('point', 'petr', 'does not work on 3D positions'),
    ('vit', 'gta', 'needs cameras'),
    ('vit', 'plucker', 'needs cameras'),
    ('vit', 'petr', 'needs cameras'),
    ('vit', 'rope3d', 'does not work on 2D positions; for image token grids choose one of'),
    ('vit', 'point_mlp', 'does not work on 2D positions'),
    ('dit', 'gta', 'needs cameras'),
    ('dit', 'plucker', 'needs cameras'),
    ('dit', 'petr', 'needs cameras'),
    ('dit', 'rope3d', 'does not work on 2D positions'),
    ('multiview', 'peg', 'needs the tokens to form one image grid'),
    ('multiview', 'lepe', 'needs the tokens to form one image grid'),
    ('multiview', 'irpe', 'needs the tokens to form one image grid'),
    ('multiview', 'rope3d', 'does not work on 2D positions'),
    ('multiview', 'point_mlp', 'does not work on 2D positions'),
]


@pytest.mark.parametrize('backbone, name, reason', REFUSED)
def test_backbone_refuses_what_it_cannot_serve(backbone, name, reason):
    build, _, label, accepted = BACKBONES[backbone]
    assert name not in accepted
    with pytest.raises(ValueError) as error:
        build([name])
    message = str(error.value)
    assert message.startswith(f'{label}: ') and name in message and reason in message
    assert str(accepted) in message  # what this backbone takes instead


def test_camera_encodings_point_to_the_multiview_transformer():
    with pytest.raises(ValueError, match=r"'gta' needs cameras.*MultiViewTransformer"):
        vit('gta')


@pytest.mark.parametrize('backbone', BACKBONES)
def test_every_encoding_is_refused_at_build_or_runs(backbone):
    """No registered encoding gets past a backbone's constructor and then fails in forward."""
    build, run, _, accepted = BACKBONES[backbone]
    for name in list_encodings():
        if name in accepted:
            assert torch.isfinite(run(build(name))).all(), name
        else:
            with pytest.raises(ValueError, match=re.escape(str(accepted))):
                build(name)


# --- 3. image sizes not divisible by the patch -----------------------------------------------------------------------
@pytest.mark.parametrize(
    'build, match',
    [
        (lambda: vit(img_size=30), r'VisionTransformerPE: img_size 30x30 .* patch_size 8x8.*32x32.*dynamic_img_pad'),
        (lambda: vit(img_size=(32, 42)), r'img_size 32x42 is not divisible by patch_size 8x8.*32x40'),
        (lambda: vispe.VisionTransformerPE(**{**TINY_VIT, 'img_size': 30}), r'img_size 30x30 .* e\.g\. img_size 32x32'),
        (lambda: dit(img_size=15, patch_size=2), r'DiT: img_size 15x15 is not divisible by patch_size 2x2.*16x16'),
        (lambda: multiview(img_size=18), r'MultiViewTransformer: img_size 18x18 .* patch_size 4x4.*16x16'),
        (lambda: multiview(patch_size=0), r'patch_size must be a positive int, got patch_size=0'),
    ],
)
def test_img_size_not_divisible_by_patch_is_refused_at_build(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_dynamic_img_pad_allows_any_img_size():
    model = vit(img_size=30, dynamic_img_pad=True)
    assert run_vit(model, 30).shape == (1, TINY_VIT['num_classes'])


@pytest.mark.parametrize(
    'build, run, match',
    [
        (vit, lambda m: run_vit(m, 36), r'36x36 is not divisible by the patch size 8x8.*32x32.*dynamic_img_pad'),
        (dit, lambda m: run_dit(m, 23), r'23x23 is not divisible by the patch size 4x4.*24x24'),
        (multiview, lambda m: run_multiview(m, 18), r'18x18 is not divisible by the patch size 4.*resize.*16x16'),
    ],
)
def test_input_size_not_divisible_by_patch_is_a_clear_error(build, run, match):
    model = build()  # builds at a valid size
    with pytest.raises(ValueError, match=match):
        run(model)


# --- 4. out-of-range values ------------------------------------------------------------------------------------------
OUT_OF_RANGE = {
    'irpe negative ratio': (lambda: vit(dict(type='irpe', ratio=-1.0)), r'iRPE ratio must be a number >= 0\.5.*-1'),
    'irpe zero ratio': (lambda: vit(dict(type='irpe', ratio=0)), r'iRPE ratio must be a number >= 0\.5.*got 0'),
    'rope_axial negative theta': (lambda: vit(dict(type='rope_axial', theta=-1.0)), r'rope_axial needs theta > 0'),
    'rope_axial zero theta': (lambda: vit(dict(type='rope_axial', theta=0.0)), r'theta > 0, got theta=0\.0'),
    'rope_mixed negative theta': (lambda: vit(dict(type='rope_mixed', theta=-10.0)), r'rope_mixed needs theta > 0'),
    'harope negative theta': (lambda: dit(dict(type='harope', theta=-1.0)), r'harope needs theta > 0'),
    'gta negative theta': (lambda: multiview(dict(type='gta', theta=-1.0)), r'gta needs theta > 0'),
    'rope3d negative theta': (lambda: point(dict(type='rope3d', theta=-1.0)), r'rope3d needs theta > 0'),
    'rope3d zero freq_scale': (lambda: point(dict(type='rope3d', freq_scale=0.0)), r'rope3d needs freq_scale > 0'),
    'ape_sincos negative temperature': (
        lambda: vit(dict(type='ape_sincos', temperature=-1.0)),
        r'ape_sincos needs temperature > 0, got temperature=-1\.0',
    ),
    'ape_sincos width not divisible by 4': (
        lambda: vit('ape_sincos', embed_dim=66, num_heads=6),
        r'ape_sincos needs a model width divisible by 4.*66',
    ),
    'comrope block_size not supported': (
        lambda: vit(dict(type='comrope_ld', block_size=3)),
        r'comrope_ld: block_size must be one of \(2, 4, 8\), got 3',
    ),
    'comrope block_size not dividing the head dim': (
        lambda: vit(dict(type='comrope_ap', block_size=8), embed_dim=48),  # head dim 12
        r'comrope_ap: head dim 12 .* must be divisible by 16.*change block_size or num_heads',
    ),
    'comrope negative rate_range': (
        lambda: vit(dict(type='comrope_ld', rate_range=(-1.0, 2.0))),
        r'comrope_ld: rate_range .* two numbers > 0, got \(-1\.0, 2\.0\)',
    ),
    'rope head dim not divisible by 4': (
        lambda: vit('rope_axial', embed_dim=72),  # head dim 18
        r'head dim \(embed_dim / num_heads\) divisible by 4 .* got 18; change embed_dim or num_heads',
    ),
    'vit num_heads not dividing embed_dim': (
        lambda: vit('rope_axial', num_heads=5),
        r'VisionTransformerPE: num_heads must be an int >= 1 dividing .* 64, got num_heads=5.*\[1, 2, 4, 8',
    ),
    'vit class num_heads not dividing embed_dim': (
        lambda: vispe.VisionTransformerPE(**{**TINY_VIT, 'num_heads': 6}),
        r'VisionTransformerPE: num_heads must be an int >= 1 dividing .* 64, got num_heads=6',
    ),
    'timm default embed_dim, num_heads not dividing it': (
        lambda: vispe.create_model('vit_tiny_patch16_224', num_heads=5, img_size=32, depth=1),
        r"vit_tiny_patch16_224 with \{'num_heads': 5\}: num_heads must be .* \(embed_dim\) 192, got num_heads=5",
    ),
    'dit num_heads not dividing embed_dim': (lambda: dit(num_heads=5), r'DiT: num_heads must be .* num_heads=5'),
    'point num_heads not dividing embed_dim': (
        lambda: point('rope3d', num_heads=5),
        r'PointTransformer: num_heads must be .* 48, got num_heads=5',
    ),
    'point zero num_heads': (lambda: point(num_heads=0), r'PointTransformer: num_heads must be an int >= 1'),
    'multiview num_heads not dividing embed_dim': (
        lambda: multiview(num_heads=3),
        r'MultiViewTransformer: num_heads must be .* num_heads=3',
    ),
    'point zero group_size': (lambda: point(group_size=0), r'PointTransformer: group_size must be an int >= 1'),
    'point zero num_groups': (lambda: point(num_groups=0), r'num_groups must be an int >= 1, got num_groups=0'),
    'point negative num_groups': (lambda: point(num_groups=-4), r'num_groups must be an int >= 1, got num_groups=-4'),
    'point negative drop_path_rate': (
        lambda: point(drop_path_rate=-0.1),
        r'PointTransformer: drop_path_rate is a probability in \[0, 1\], got drop_path_rate=-0\.1',
    ),
    'multiview drop_path_rate above 1': (
        lambda: multiview(drop_path_rate=1.5),
        r'MultiViewTransformer: drop_path_rate is a probability in \[0, 1\]',
    ),
    'vit negative drop_path_rate': (
        lambda: vit(drop_path_rate=-0.1),
        r'VisionTransformerPE: drop_path_rate is a probability in \[0, 1\]',
    ),
    'vit negative attn_drop_rate': (lambda: vit(attn_drop_rate=-0.5), r'attn_drop_rate is a probability'),
    'dit class_dropout_prob above 1': (
        lambda: dit(class_dropout_prob=1.5),
        r'DiT: class_dropout_prob is a probab',
    ),
    'lff zero hidden_dim': (lambda: vit(dict(type='lff', hidden_dim=0)), r'lff needs hidden_dim > 0, got hidden_dim=0'),
    'lff odd num_features': (lambda: vit(dict(type='lff', num_features=3)), r'lff needs an even num_features'),
    'point_mlp zero hidden_dim': (
        lambda: point(dict(type='point_mlp', hidden_dim=0)),
        r'point_mlp needs hidden_dim > 0',
    ),
    'petr zero num_depths': (lambda: multiview(dict(type='petr', num_depths=0)), r'petr needs num_depths > 0'),
    'petr negative hidden_dim': (lambda: multiview(dict(type='petr', hidden_dim=-1)), r'petr needs hidden_dim > 0'),
    'peg even kernel': (
        lambda: vit(dict(type='peg', kernel_size=2)),
        r'odd kernel_size.*got 2; use e\.g\. 3',
    ),
    'peg block past the last': (lambda: vit(dict(type='peg', blocks=5)), r'peg blocks \(5,\) .* use 0\.\.1'),
    'gta se3_fraction above 1': (lambda: multiview(dict(type='gta', se3_fraction=1.5)), r'se3_fraction .* \[0, 1\]'),
}


@pytest.mark.parametrize('case', OUT_OF_RANGE)
def test_out_of_range_value_is_refused_at_build(case):
    build, match = OUT_OF_RANGE[case]
    with pytest.raises(ValueError, match=match):
        build()


def test_num_heads_is_checked_when_an_encoding_is_built_alone():
    with pytest.raises(ValueError, match=r'rope_axial: num_heads must be .* 64, got num_heads=5'):
        build_encoding('rope_axial', dim=64, num_heads=5)


@pytest.mark.parametrize(
    'build',
    [
        lambda sampler: vit(position_sampler=sampler),  # TINY_VIT: 32 px / patch 4 = an 8x8 grid
        lambda sampler: vispe.apply_encoding(
            vispe.create_model('vit_tiny_patch16_224', encoding=None, **TINY_VIT),
            'rope_axial',
            position_sampler=sampler,
        ),
        lambda sampler: dit(position_sampler=sampler),  # DIT: 16 px / patch 4 = a 4x4 grid
    ],
)
def test_rpe2d_range_smaller_than_the_model_grid_is_refused_at_build(build):
    with pytest.raises(ValueError, match=r'rpe2d: max_grid \(L\) 3x3 must be >= the token grid.*raise max_grid'):
        build(dict(type='rpe2d', max_grid=(3, 3)))
    assert build(dict(type='rpe2d', max_grid=(8, 8))).position_sampler.max_grid == (8, 8)
