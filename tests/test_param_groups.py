"""Optimizer groups from one declaration (issue 16, item 4).

Every registered encoding, in every backbone that accepts it, gets the weight decay its class declares
(``no_weight_decay_params``) and the layer it sits in, through both optimizer paths: vispe's mmengine constructor
(``ParamGroupsOptimWrapperConstructor``, layer-wise lr decay included) and timm's ``create_optimizer_v2``. Before, the
decay policy lived in config substrings that mmengine matched by accident or not at all (gta's translation_scale
was decayed in every camera config), and timm gave model-level encodings the head's lr scale (1.0).
"""

from __future__ import annotations

import glob
import os

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from timm.optim import create_optimizer_v2
from torch import nn

from tests.conftest import ROOT, TINY_VIT
from vispe.backbones.base import backbone_encodings
from vispe.backbones.dit import DiT
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.backbones.point import PointTransformer
from vispe.backbones.video import VideoTransformer
from vispe.backbones.vit import VisionTransformerPE
from vispe.encodings.base import Encoding
from vispe.encodings.build import list_encodings
from vispe.engine.optim import ParamGroupsOptimWrapperConstructor
from vispe.registry import MODELS

#: what each encoding keeps out of weight decay (names relative to it), besides its 1-D parameters and biases; a
#: new encoding fails here until it is given an entry (and a decision, in its class docstring)
DECLARED = {
    'ape_learned': {'pos_embed'},  # ViT / DeiT
    'ape_sincos': set(),
    'comrope_ap': {'P'},
    'comrope_ld': {'P', 'theta'},
    'gta': {'translation_scale'},
    'harope': {'A_u', 'A_v', 'sigma'},
    'irpe': set(),  # the reference decays its tables
    'lepe': set(),
    'lff': {'freqs.weight'},
    'liere': {'generators'},  # the reference trains with Adam, no weight decay at all
    'loope': {'context_bias'},  # a per-patch shift of the position, not a weight
    'peg': set(),
    'petr': set(),
    '3dppe': set(),  # its encoder and depth head are linear layers, decayed as in the reference
    'plucker': set(),
    'point_mlp': set(),
    'rope3d': {'freqs'},  # mixed mode; in axial mode freqs is a buffer
    'rope_axial': set(),
    'rope_mixed': {'freqs'},  # RoPE-ViT's reference
    'string_cayley': {'A', 'freqs'},  # the Cayley generator (decay would pull P to I) and rope_mixed's frequencies
    'string_circulant': {'coeffs'},  # the frequencies in the circulant basis
}
#: the backbones' own no-decay parameters, where present
TOKENS = {'cls_token', 'reg_token', 'pos_embed'}
DEPTH = 2
WD, LR, RATE = 0.05, 1e-3, 0.5


def vit(encoding):
    return VisionTransformerPE(encoding=encoding, reg_tokens=1, **TINY_VIT)


def dit(encoding):
    return DiT(img_size=8, patch_size=2, in_chans=3, embed_dim=64, depth=DEPTH, num_heads=4, num_classes=3,
               encoding=encoding)  # fmt: skip


def point(encoding):
    return PointTransformer(num_classes=3, encoding=encoding, num_groups=8, group_size=4, embed_dim=64, depth=DEPTH,
                            num_heads=4, group_hidden=8)  # fmt: skip


def video(encoding):
    return VideoTransformer(num_classes=3, encoding=encoding, img_size=8, num_frames=4, patch_size=4, embed_dim=64,
                            depth=DEPTH, num_heads=4)  # fmt: skip


def multiview(encoding):
    return MultiViewTransformer(num_outputs=3, encoding=encoding, img_size=8, patch_size=4, embed_dim=64,
                                depth=DEPTH, num_heads=4)  # fmt: skip


#: backbone -> (factory, the encodings it accepts, extra specs, stem prefixes (layer 0), a stem weight for timm)
BACKBONES = {
    'vit': (vit, backbone_encodings(2), [
        dict(type='irpe', mode='bias'),
        dict(type='irpe', method='cross', on='qkv', shared_heads=False),
        ['ape_learned', 'peg', 'rope_mixed'],
    ], ('cls_token', 'reg_token', 'pos_embed', 'patch_embed.', 'norm_pre.'), 'patch_embed.proj.weight'),
    'dit': (dit, backbone_encodings(2), [['ape_learned', 'lepe', 'comrope_ld']],
            ('x_embedder.', 't_embedder.', 'y_embedder.', 'crop_embedder.'), 'x_embedder.proj.weight'),
    'point': (point, backbone_encodings(3, grid=False), [dict(type='rope3d', mode='mixed'), ['point_mlp', 'rope3d']],
              ('group_embed.', 'cls_token'), 'group_embed.first.0.weight'),
    'multiview': (multiview, multiview_encodings(), [['gta', 'ape_learned'], ['plucker', 'rope_mixed']],
                  ('patch_embed.',), 'patch_embed.proj.weight'),
    'video': (video, [n for n in backbone_encodings(3) if n not in backbone_encodings(3, grid=False)],
              [['ape_learned', 'mrope']], ('patch_embed.', 'cls_token'), 'patch_embed.weight'),
}  # fmt: skip
CASES = [
    pytest.param(kind, spec, id=f'{kind}-{spec if isinstance(spec, str) else spec}')
    for kind, (_, names, extra, _, _) in BACKBONES.items()
    for spec in [*names, *extra]
]


def declared(backbone: nn.Module) -> set:
    """Full names of the tokens and of each encoding's DECLARED parameters: what ``no_weight_decay()`` says."""
    skip = {n for n, _ in backbone.named_parameters() if n in TOKENS}
    for prefix, module in backbone.named_modules():
        if isinstance(module, Encoding):
            own = {n for n, _ in module.named_parameters()}
            skip |= {f'{prefix}.{n}' for n in DECLARED.get(module.registry_name(), set()) & own}
    return skip


def expected_no_decay(backbone: nn.Module) -> set:
    """Full names that take no decay: the declared ones, 1-D parameters and biases."""
    rule = {n for n, p in backbone.named_parameters() if p.ndim <= 1 or n.endswith('.bias')}
    return declared(backbone) | rule


def expected_layer(name: str, stems) -> int:
    """BEiT's layer: 0 the stem and the model-level encodings (pe.*), i + 1 block i with its encodings, depth + 1
    the rest."""
    if name.startswith('blocks.'):
        return int(name.split('.')[1]) + 1
    if name.startswith(('pe.', *stems)):
        return 0
    return DEPTH + 1


def group_of(optimizer, model: nn.Module) -> dict:
    by_id = {id(p): g for g in optimizer.param_groups for p in g['params']}
    return {n: by_id[id(p)] for n, p in model.named_parameters()}


class Task(nn.Module):
    """A task model around the backbone, as vispe's tasks hold it (``model.backbone``), with a module of its own."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.neck = nn.Linear(3, 3)


def constructor(**paramwise):
    return ParamGroupsOptimWrapperConstructor(dict(optimizer=dict(type='AdamW', lr=LR, weight_decay=WD)), paramwise)


# --- the declaration ------------------------------------------------------------------------------------------------
def test_every_registered_encoding_has_a_declaration_and_a_backbone() -> None:
    """Every encoding with parameters has a reviewed entry in DECLARED (one without any has nothing to decide), and
    every encoding is tested in some backbone."""
    served = set().union(*(names for _, names, _, _, _ in BACKBONES.values()))
    assert served == set(list_encodings()), 'each encoding is tested in some backbone'
    with_params = {
        name
        for case in CASES
        for name, enc in BACKBONES[case.values[0]][0](case.values[1]).encodings()
        if any(True for _ in enc.parameters())
    }
    assert with_params <= set(DECLARED), f'decide the weight decay of {sorted(with_params - set(DECLARED))}'


@pytest.mark.parametrize('kind, spec', CASES)
def test_encodings_report_what_they_declare(kind, spec) -> None:
    backbone = BACKBONES[kind][0](spec)
    for name, enc in backbone.encodings():
        own = {n for n, _ in enc.named_parameters()}
        assert enc.no_weight_decay() == DECLARED.get(name, set()) & own
        if name != 'rope3d' or enc.mode == 'mixed':
            assert DECLARED.get(name, set()) <= own, f'{name} declares names it does not have'
    assert backbone.no_weight_decay() == declared(backbone)  # the set timm's create_optimizer_v2 reads


# --- mmengine: ParamGroupsOptimWrapperConstructor ---------------------------------------------------------------
@pytest.mark.parametrize('kind, spec', CASES)
def test_mmengine_groups_follow_the_declaration_and_the_layers(kind, spec) -> None:
    factory, _, _, stems, _ = BACKBONES[kind]
    task = Task(factory(spec))
    skip = {f'backbone.{n}' for n in expected_no_decay(task.backbone)} | {'neck.bias'}
    groups = group_of(constructor(layer_decay_rate=RATE)(task).optimizer, task)
    for name, group in groups.items():
        assert group['weight_decay'] == (0.0 if name in skip else WD), name
        layer = expected_layer(name[len('backbone.') :], stems) if name.startswith('backbone.') else DEPTH + 1
        assert group['lr'] == pytest.approx(LR * RATE ** (DEPTH + 1 - layer)), name
    plain = group_of(constructor()(task).optimizer, task)
    assert all(g['lr'] == LR for g in plain.values())
    assert {n for n, g in plain.items() if g['weight_decay'] == 0.0} == skip


# --- timm: create_optimizer_v2 --------------------------------------------------------------------------------------
@pytest.mark.parametrize('kind, spec', CASES)
def test_timm_groups_follow_the_declaration_and_the_layers(kind, spec) -> None:
    factory, _, _, _, stem_weight = BACKBONES[kind]
    backbone = factory(spec)
    skip = expected_no_decay(backbone)
    plain = group_of(create_optimizer_v2(backbone, 'adamw', lr=LR, weight_decay=WD), backbone)
    assert {n for n, g in plain.items() if g['weight_decay'] == 0.0} == skip
    groups = group_of(create_optimizer_v2(backbone, 'adamw', lr=LR, weight_decay=WD, layer_decay=RATE), backbone)
    assert {n for n, g in groups.items() if g['weight_decay'] == 0.0} == skip
    scale = {n: g['lr_scale'] for n, g in groups.items()}
    assert scale[stem_weight] == min(scale.values()) < 1.0
    for name in scale:
        if name.startswith('pe.'):  # model-level encodings: the stem's scale, not the head's 1.0
            assert scale[name] == scale[stem_weight], name
        elif '.attn.pe.' in name:  # per-layer encodings: their block's
            block = name.split('.attn.pe.')[0]
            assert scale[name] == scale[f'{block}.attn.qkv.weight'] < 1.0, name


def test_timm_gives_the_learned_table_and_peg_the_stem_scale() -> None:
    """Before: pe.ape_learned.pos_embed and pe.peg.proj.* matched no group and took the head's 1.0."""
    model = vit(['ape_learned', 'peg'])
    optimizer = create_optimizer_v2(model, 'adamw', lr=LR, weight_decay=WD, layer_decay=0.65)
    groups = group_of(optimizer, model)
    stem = groups['patch_embed.proj.weight']['lr_scale']
    assert stem == pytest.approx(0.65**3)  # timm's layers: stem, block 0, block 1 with the final norm, head
    for name in ('pe.ape_learned.pos_embed', 'pe.peg.proj.weight', 'pe.peg.proj.bias'):
        assert groups[name]['lr_scale'] == stem
    assert groups['pe.ape_learned.pos_embed']['weight_decay'] == 0.0
    assert groups['pe.peg.proj.weight']['weight_decay'] == WD  # an ordinary conv weight


# --- the configs ----------------------------------------------------------------------------------------------------
CONFIGS = sorted(p for kind in ('camera', 'dit', 'point', 'vit') for p in glob.glob(f'{ROOT}/configs/{kind}/*.py'))


def test_the_camera_config_does_not_decay_gta_translation_scale() -> None:
    """Before: the camera configs' custom_keys did not match 'translation_scale', so mmengine decayed it."""
    cfg = Config.fromfile(os.path.join(ROOT, 'configs', 'camera', 'multiview_tiny_gta_scenes.py'))
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    groups = group_of(wrapper.optimizer, model)
    scales = [n for n in groups if n.endswith('translation_scale')]
    assert len(scales) == cfg.model.backbone.depth
    assert all(groups[n]['weight_decay'] == 0.0 for n in scales)
    assert groups['backbone.blocks.0.attn.qkv.weight']['weight_decay'] == cfg.optim_wrapper.optimizer.weight_decay > 0


@pytest.mark.parametrize('path', CONFIGS, ids=[os.path.relpath(p, ROOT) for p in CONFIGS])
def test_configs_take_decay_from_the_declaration(path) -> None:
    optim = Config.fromfile(path).optim_wrapper
    assert optim.constructor == 'ParamGroupsOptimWrapperConstructor'
    assert 'custom_keys' not in (optim.get('paramwise_cfg') or {})


def test_the_config_layer_decay_option_reaches_the_groups() -> None:
    cfg = Config.fromfile(os.path.join(ROOT, 'configs', 'vit', 'vit_tiny_ape_learned_shapes2d_position.py'))
    cfg.merge_from_dict({'optim_wrapper.paramwise_cfg.layer_decay_rate': 0.5})
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
        groups = group_of(build_optim_wrapper(model, cfg.optim_wrapper).optimizer, model)
    depth, lr = len(model.backbone.blocks), cfg.optim_wrapper.optimizer.lr
    assert groups['backbone.pe.ape_learned.pos_embed']['lr'] == pytest.approx(lr * 0.5 ** (depth + 1))
    assert groups['backbone.pe.ape_learned.pos_embed']['weight_decay'] == 0.0
    assert groups['backbone.head.weight']['lr'] == pytest.approx(lr)


# --- what the constructor refuses ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    'paramwise, match',
    [
        (dict(custom_keys={'.freqs': dict(decay_mult=0.0)}), 'declared by the model'),
        (dict(custom_keys={'head': dict(lr_mult=2.0, foo=1)}), 'lr_mult only'),
        (dict(norm_decay_mult=0.5), 'contradicts the decay rule'),
        (dict(bias_decay_mult=1.0), 'contradicts the decay rule'),
        (dict(dwconv_decay_mult=0.0), 'does not take'),
        (dict(layer_decay=0.5), "unknown paramwise_cfg.layer_decay; it takes \\['layer_decay_rate'"),
        (dict(layer_decay_rate=1.5), r'\(0, 1\]'),
        (dict(layer_decay_rate=0), r'\(0, 1\]'),
    ],
)
def test_options_that_would_set_decay_another_way_are_refused(paramwise, match) -> None:
    with pytest.raises(ValueError, match=match):
        constructor(**paramwise)


def test_layer_decay_needs_one_backbone() -> None:
    with pytest.raises(ValueError, match='exactly one vispe backbone.*found 0'):
        constructor(layer_decay_rate=0.5)(nn.Linear(2, 2))
    two = nn.ModuleDict(dict(a=vit('rope_axial'), b=vit('rope_axial')))
    with pytest.raises(ValueError, match=r"found 2 at \['a', 'b'\]"):
        constructor(layer_decay_rate=0.5)(two)


def test_restated_rules_lr_multipliers_and_models_without_a_backbone() -> None:
    model = Task(vit('ape_learned'))
    groups = group_of(
        constructor(norm_decay_mult=0.0, custom_keys={'head': dict(lr_mult=10.0)})(model).optimizer, model
    )
    assert groups['backbone.head.weight']['lr'] == pytest.approx(10 * LR)
    assert groups['backbone.head.weight']['weight_decay'] == WD
    assert groups['backbone.blocks.0.attn.qkv.weight']['lr'] == LR
    assert groups['backbone.norm.weight']['weight_decay'] == 0.0
    # a model that declares nothing: the 1-D rule alone; a plain timm ViT: timm's own declaration is read
    plain = nn.Sequential(nn.Linear(2, 2))
    groups = group_of(constructor()(plain).optimizer, plain)
    assert (groups['0.weight']['weight_decay'], groups['0.bias']['weight_decay']) == (WD, 0.0)
    import timm

    timm_vit = timm.create_model('vit_tiny_patch16_224', img_size=32, patch_size=8, depth=1, num_classes=3)
    groups = group_of(constructor()(timm_vit).optimizer, timm_vit)
    assert groups['pos_embed']['weight_decay'] == groups['cls_token']['weight_decay'] == 0.0
    assert groups['blocks.0.attn.qkv.weight']['weight_decay'] == WD


def test_every_parameter_is_in_exactly_one_group() -> None:
    model = Task(vit(['ape_learned', 'peg', 'rope_mixed']))
    optimizer = constructor(layer_decay_rate=RATE)(model).optimizer
    ids = [id(p) for g in optimizer.param_groups for p in g['params']]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    assert not any('names' in g for g in optimizer.param_groups)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the groups hold ordinary parameters
