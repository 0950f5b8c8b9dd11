"""vispe's timm names: ``vit_{size}_patch16_{encoding}_224`` for every 2D encoding, as first-class timm models.

Importing vispe registers them (``vispe.TIMM_NAMES``); timm lists them under this module's name
(``timm.list_models(module='vispe_vit')``). Each has its own pretrained config in ``default_cfgs``: architecture = its
name, no weights (no hub id, url or file: vispe ships none), the preprocessing vispe's image pipeline uses
(ImageNet mean / std, bilinear resize of the short side then a centre crop of the same size, so ``crop_pct`` 1.0)
and 1000 classes. A built model's ``pretrained_cfg`` describes that model: its input size and class count, and
with ``pretrained_cfg_overlay=dict(file=...)`` or ``local-dir:`` the weights it was loaded from.

Weights load strictly (``load_vispe_weights``): every key and shape must fit, except a classifier head of another
size when the model is built with another ``num_classes`` (that head starts afresh, and a warning says so). A vispe
state dict, an mmengine checkpoint of ``tools/train.py`` (``state_dict`` with the ``backbone.`` prefix of the
classifier task) and a ``timm.models.save_for_hf`` folder all load. ``features_only=True`` honours timm's
``feature_cls``: 'getter' (the default, as timm's ViTs), 'hook' and 'fx'; 'list' and 'dict' are refused, as timm
refuses them for its ViTs.
"""

from __future__ import annotations

import glob
import os
import warnings
from typing import TYPE_CHECKING, Any

import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._builder import pretrained_cfg_for_features
from torch import nn

from vispe.encodings.build import EncodingSpec, list_encodings, normalize_spec

if TYPE_CHECKING:
    from vispe.backbones.vit import VisionTransformerPE

#: the timm ViT each size is built like (patch 16, 224 px): (embed_dim, depth, num_heads), as timm's vit_{size}
ARCHS: dict[str, dict[str, int]] = {
    'tiny': dict(embed_dim=192, depth=12, num_heads=3),
    'small': dict(embed_dim=384, depth=12, num_heads=6),
    'base': dict(embed_dim=768, depth=12, num_heads=12),
    'large': dict(embed_dim=1024, depth=24, num_heads=16),
}
TIMM_BASES = {size: f'vit_{size}_patch16_224' for size in ARCHS}
#: feature wrappers timm's ViTs support with features_only (the ones vispe's support too)
FEATURE_CLASSES = ('getter', 'hook', 'fx')


def vispe_name(size: str, encoding: str) -> str:
    return f'vit_{size}_patch16_{encoding}_224'


def _cfg(**overrides: Any) -> dict[str, Any]:
    """The pretrained config of a vispe name: what vispe's image pipeline feeds it (ImageFolderDataset's eval
    transform: bilinear resize of the short side to the crop, centre crop, ImageNet mean / std), and no weights."""
    return dict(
        url='',
        num_classes=1000,
        input_size=(3, 224, 224),
        pool_size=None,
        crop_pct=1.0,
        crop_mode='center',
        interpolation='bilinear',
        fixed_input_size=False,
        mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD,
        first_conv='patch_embed.proj',
        classifier='head',
        license='apache-2.0',
        **overrides,
    )


def _parse(name: str) -> tuple[str, str]:
    """'vit_tiny_patch16_irpe_224' -> ('tiny', 'irpe')."""
    size, rest = name[len('vit_') :].split('_patch16_', 1)
    return size, rest[: -len('_224')]


# --- weights --------------------------------------------------------------------------------------------------------
def _strip_prefix(state: dict[str, torch.Tensor], model_keys: set) -> dict[str, torch.Tensor]:
    """An mmengine classifier checkpoint holds the backbone under ``backbone.`` (and the data preprocessor beside
    it, which has no weights of the ViT): keep those keys, prefix removed, when that is what fits the model."""
    if any(k in model_keys for k in state) or not any(k.startswith('backbone.') for k in state):
        return state
    return {k[len('backbone.') :]: v for k, v in state.items() if k.startswith('backbone.')}


def weights_file(cfg: dict[str, Any]) -> str:
    """The weights named by a pretrained config's ``file``: the file itself, or in a folder (timm's
    ``save_for_hf`` / ``local-dir:``) its model.safetensors or pytorch_model.bin; a path that does not exist is a
    FileNotFoundError naming it."""
    path = cfg['file']
    if not os.path.exists(path):
        raise FileNotFoundError(
            f'pretrained_cfg_overlay=dict(file={path!r}): no such file or folder (relative paths start at '
            f'{os.getcwd()}); put the weights there or give their path'
        )
    if os.path.isdir(path):
        for name in ('model.safetensors', 'pytorch_model.bin', 'open_clip_pytorch_model.bin'):
            if os.path.isfile(os.path.join(path, name)):
                return os.path.join(path, name)
        raise FileNotFoundError(f'{path!r} holds no model.safetensors or pytorch_model.bin (timm.models.save_for_hf)')
    return path


def _head_keys(model: VisionTransformerPE) -> list[str]:
    head = getattr(model, 'head', None)
    return [f'head.{k}' for k in head.state_dict()] if isinstance(head, nn.Module) else []


def load_vispe_weights(model: VisionTransformerPE, state: dict[str, torch.Tensor], path: str = 'weights') -> list[str]:
    """Load ``state`` into the vispe ViT ``model``, strictly but for the head: every other key and shape must fit,
    else ``CheckpointError`` naming what differs (the model is left untouched). A head of another shape (the model
    was built with another ``num_classes``) is left at its fresh initialisation, with a warning; a head the model
    has and the file lacks is refused unless the model has none (``num_classes=0``). Returns the keys left fresh."""
    from vispe.engine.checkpoint import CheckpointError, StateMismatch, upgrade_state

    model_state = model.state_dict()
    state = upgrade_state(model, _strip_prefix(state, set(model_state)), path)
    mismatch = StateMismatch(model_state, state)
    heads = set(_head_keys(model))
    file_heads = {k for k in state if k.startswith('head.')}
    fresh = [k for k in mismatch.mismatched if k in heads]
    unused = [k for k in mismatch.unexpected if k in file_heads and not heads]  # a num_classes=0 model
    other = StateMismatch(
        {k: v for k, v in model_state.items() if k not in fresh},
        {k: v for k, v in state.items() if k not in fresh and k not in unused},
    )
    if other:
        detail = other.describe()
        raise CheckpointError(
            f'{path!r} does not fit {type(model).__name__} ({_describe(model)}): {detail}. Build the model the '
            'weights were trained as: the same name or encoding, embed_dim, depth, num_heads, patch_size and '
            'img_size (a different num_classes is fine: the head then starts afresh)'
        )
    with torch.no_grad():
        model.load_state_dict({k: v for k, v in state.items() if k not in fresh and k not in unused}, strict=False)
    if fresh:
        shapes = ', '.join(f'{k} {tuple(state[k].shape)} -> {tuple(model_state[k].shape)}' for k in fresh)
        warnings.warn(
            f'{path}: the classifier head has another number of classes ({shapes}); it starts from a fresh '
            'initialisation, every other weight was loaded',
            stacklevel=3,
        )
    return fresh


def _describe(model: VisionTransformerPE) -> str:
    names = getattr(model, 'encoding_names', None)
    return f'encodings {names}, embed_dim {model.embed_dim}, depth {len(model.blocks)}, {model.num_classes} classes'


def _load_pretrained(model: VisionTransformerPE, cfg: dict[str, Any]) -> None:
    """``pretrained=True``: the weights the config names (``file``; ``state_dict``), strictly. vispe's names have
    none of their own, so without a file this says so instead of returning random weights."""
    if cfg.get('state_dict') is not None:
        load_vispe_weights(model, cfg['state_dict'], 'pretrained_cfg state_dict')
        return
    if cfg.get('file'):
        load_checkpoint_into(model, weights_file(cfg))
        return
    if cfg.get('hf_hub_id') or cfg.get('url'):
        from timm.models import load_pretrained

        def strict_filter(state, model):
            load_vispe_weights(model, state, cfg.get('hf_hub_id') or cfg.get('url'))  # raises on a mismatch
            return model.state_dict()

        load_pretrained(model, pretrained_cfg=cfg, num_classes=model.num_classes, filter_fn=strict_filter)
        return
    raise ValueError(
        f'{cfg.get("architecture")} has no pretrained weights (vispe ships none): train it (tools/train.py) and load '
        'the checkpoint with vispe.create_model(name, checkpoint_path=...), or name a file with '
        "pretrained_cfg_overlay=dict(file='weights.pth'), or a timm.models.save_for_hf folder as 'local-dir:PATH'"
    )


# --- building -------------------------------------------------------------------------------------------------------
def describe_model_cfg(model: VisionTransformerPE, cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` made to describe ``model``: its input size (channels, img_size) and class count."""
    cfg = dict(cfg)
    img_size = tuple(model.patch_embed.img_size) if model.patch_embed.img_size is not None else cfg['input_size'][1:]
    cfg['input_size'] = (model.patch_embed.proj.in_channels, *img_size)
    cfg['num_classes'] = model.num_classes
    return cfg


def check_feature_cls(name: str, feature_cls: Any) -> Any:
    if isinstance(feature_cls, str) and feature_cls.lower() not in FEATURE_CLASSES:
        raise ValueError(
            f'{name}: features_only supports feature_cls {list(FEATURE_CLASSES)} (as timm ViTs do; getter is the '
            f"default, giving NCHW maps), got {feature_cls!r}: 'list' and 'dict' need a model whose stages are its "
            'direct children, which a ViT is not'
        )
    return feature_cls


def split_feature_args(name: str, kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Take ``features_only`` and the feature wrapper's arguments (out_indices, feature_cls, output_fmt) out of
    ``kwargs``; an unsupported ``feature_cls`` is refused here, before anything is built."""
    features_only = kwargs.pop('features_only', False)
    feature_cfg: dict[str, Any] = {
        k: kwargs.pop(k) for k in ('out_indices', 'feature_cls', 'output_fmt') if k in kwargs
    }
    if features_only:
        check_feature_cls(name, feature_cfg.get('feature_cls', 'getter'))
    return features_only, feature_cfg


def wrap_features(model: VisionTransformerPE, name: str, feature_cls: Any = 'getter', **feature_cfg: Any) -> nn.Module:
    """timm's feature wrapper around a vispe ViT (``features_only=True``), carrying the model's pretrained config
    (without the classifier entries, as timm does)."""
    from timm.models._features import FeatureGetterNet, FeatureHookNet
    from timm.models._features_fx import FeatureGraphNet

    feature_cls = check_feature_cls(name, feature_cls)
    if isinstance(feature_cls, str):
        feature_cls = {'getter': FeatureGetterNet, 'hook': FeatureHookNet, 'fx': FeatureGraphNet}[feature_cls.lower()]
    feature_cfg.setdefault('out_indices', 3)
    if feature_cls is not FeatureGetterNet:
        feature_cfg.pop('output_fmt', None)
    cfg = model.pretrained_cfg
    wrapper = feature_cls(model, **feature_cfg)
    wrapper.pretrained_cfg = wrapper.default_cfg = pretrained_cfg_for_features(cfg)
    return wrapper


def _create(variant: str, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    from vispe.backbones.vit import VisionTransformerPE

    size, encoding = _parse(variant)
    features_only, feature_cfg = split_feature_args(variant, kwargs)
    args: dict[str, Any] = dict(patch_size=16, encoding=encoding, **ARCHS[size])
    args.update(kwargs)
    model = build_model_with_cfg(VisionTransformerPE, variant, pretrained=False, **args)
    if pretrained:
        _load_pretrained(model, model.pretrained_cfg)
    model.pretrained_cfg = model.default_cfg = describe_model_cfg(model, model.pretrained_cfg)
    if features_only:
        return wrap_features(model, variant, **feature_cfg)
    return model


def _make_entrypoint(name: str):
    def entrypoint(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        return _create(name, pretrained=pretrained, **kwargs)

    size, encoding = _parse(name)
    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__ = __name__
    entrypoint.__doc__ = (
        f'timm {TIMM_BASES[size]} with vispe encoding {encoding!r} (any H x W divisible by 16; no pretrained '
        'weights). Keyword arguments go to VisionTransformerPE (timm VisionTransformer arguments, encoding=...).'
    )
    return entrypoint


#: the pretrained configs timm's register_model reads (filled by register_timm_names)
default_cfgs: dict[str, Any] = {}


def register_timm_names(encodings: list[str] | None = None) -> list[str]:
    """Register ``vit_{size}_patch16_{encoding}_224`` (with its pretrained config) for each 2D encoding; a name
    timm already has is left to timm. Returns the names added."""
    encodings = list_encodings(ndim=2) if encodings is None else encodings
    names = [
        vispe_name(size, enc)
        for size in ARCHS
        for enc in encodings
        if not timm.is_model(vispe_name(size, enc)) or vispe_name(size, enc) in default_cfgs
    ]
    default_cfgs.update(generate_default_cfgs({name: _cfg() for name in names}))
    for name in names:
        register_model(_make_entrypoint(name))
    return names


def registered_name(base: str, encoding: EncodingSpec) -> str | None:
    """The vispe name that builds timm's ``base`` with ``encoding`` (its first encoding names it; the others come
    as ``encoding=``), or None when ``base`` is not one vispe names (vit_{tiny,small,base,large}_patch16_224)."""
    size = next((s for s, b in TIMM_BASES.items() if b == base), None)
    cfgs = normalize_spec(encoding) if encoding is not None else []
    if size is None or not cfgs:
        return None
    name = vispe_name(size, cfgs[0]['type'])
    return name if name in default_cfgs else None


def adopt_converted(
    model: VisionTransformerPE,
    base: str,
    encoding: EncodingSpec,
    source_cfg: dict[str, Any],
    pretrained: bool,
    model_args: dict[str, Any],
) -> None:
    """Give a timm ViT that ``apply_encoding`` converted to ``encoding`` a pretrained config of its own
    (``create_model``'s docstring) and the model arguments that rebuild it (``timm.models.save_for_hf`` writes
    them: the name's own encoding is implied, any other spec, options included, is an argument)."""
    name = registered_name(base, encoding)
    if pretrained:  # the weights are timm's: their preprocessing, not their source, which is another model
        cfg = {k: v for k, v in source_cfg.items() if k not in ('hf_hub_id', 'url', 'file', 'state_dict', 'source')}
    else:
        cfg = _cfg()
    cfg.update(architecture=name or base, tag=None)
    model.pretrained_cfg = model.default_cfg = describe_model_cfg(model, cfg)
    args = {**(getattr(model, '_model_args', None) or {}), **model_args}
    args.pop('encoding', None)
    spec = normalize_spec(encoding)
    if name is None or spec != [{'type': _parse(name)[1]}]:
        args['encoding'] = spec
    model._model_args = {k: v for k, v in args.items() if k not in ('pretrained_cfg_overlay', 'position_sampler')}


def from_local_dir(
    cfg: dict[str, Any],
    architecture: str,
    model_args: dict[str, Any],
    pretrained: bool,
    checkpoint_path: str | None,
    **kwargs: Any,
) -> nn.Module:
    """``vispe.create_model('local-dir:PATH')`` of a converted timm name (``encoding`` among its saved model arguments
    ``model_args``, its ``architecture`` the timm name; ``cfg`` the folder's pretrained config), which timm cannot
    rebuild: the model from its arguments, then with ``pretrained=True`` the folder's weights, strictly, as timm
    does for its own names."""
    from vispe.backbones.vit import VisionTransformerPE, create_model

    features_only, feature_kwargs = split_feature_args(architecture, kwargs)
    model = create_model(architecture, **{**model_args, **kwargs})
    assert isinstance(model, VisionTransformerPE)  # without features_only, create_model returns the model itself
    if pretrained:
        load_checkpoint_into(model, weights_file(cfg))
        kept = {k: v for k, v in cfg.items() if k not in ('architecture', 'file', 'source', 'tag')}
        model.pretrained_cfg = model.default_cfg = describe_model_cfg(model, {**model.pretrained_cfg, **kept})
    if checkpoint_path is not None:
        load_checkpoint_into(model, checkpoint_path)
    if features_only:
        return wrap_features(model, architecture, **feature_kwargs)
    return model


def load_checkpoint_into(model: VisionTransformerPE, path: str) -> None:
    """The one reader of weight files (``checkpoint_path=``, ``pretrained_cfg_overlay=dict(file=...)``,
    ``local-dir:``): a state dict, a safetensors file or a ``tools/train.py`` checkpoint (``torch.load(weights_only=
    True)`` with vispe's allow-list), loaded strictly (``load_vispe_weights``); a mismatch with a training checkpoint
    also names the backbone arguments its config had. A training checkpoint's record of what it trained on sets the
    encodings' training grid (``run_meta.align_training_grid``; a warning says so where ``img_size`` differs)."""
    from vispe.engine.checkpoint import CheckpointError, load_checkpoint, state_dict_of
    from vispe.engine.run_meta import align_training_grid

    if path.endswith('.safetensors'):
        from safetensors.torch import load_file

        load_vispe_weights(model, load_file(path), path)
        return
    ckpt = load_checkpoint(path)
    try:
        load_vispe_weights(model, state_dict_of(ckpt, path), path)
    except CheckpointError as error:
        trained = trained_backbone(ckpt, path)
        if trained is None:
            raise
        args = ', '.join(f'{k}={v!r}' for k, v in trained.items())
        raise CheckpointError(f'{error}. Its training config built the backbone with: {args}') from None
    meta = ckpt.get('meta') or {}
    for note in align_training_grid(model, {}, meta):  # strategies scale from what the checkpoint trained on
        warnings.warn(f'{path}: {note}', UserWarning, stacklevel=3)


def trained_backbone(ckpt: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The ``model.backbone`` arguments of the config a checkpoint was trained from: the config text mmengine keeps
    in its meta ('cfg'), else the one config beside it (the work dir's dump, a model-zoo folder's config.py); None
    when neither is there or parses."""
    from mmengine.config import Config

    text = (ckpt.get('meta') or {}).get('cfg')
    beside = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(path)), '*.py')))
    try:
        if isinstance(text, str):
            cfg = Config.fromstring(text, file_format='.py')
        elif len(beside) == 1:
            cfg = Config.fromfile(beside[0])
        else:
            return None
    except Exception:  # a config that no longer parses (moved bases): the key mismatch alone must do
        return None
    backbone = cfg.get('model', {}).get('backbone')
    return dict(backbone) if isinstance(backbone, dict) else None
