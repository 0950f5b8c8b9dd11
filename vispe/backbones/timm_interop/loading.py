"""Weights for vispe's ViT: the reader of weight files, the strict loader, ``pretrained=True`` of a vispe name, the
pretrained config of a built model and timm's feature wrappers."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from timm.models._builder import pretrained_cfg_for_features
from torch import nn

from vispe.backbones.vit import VisionTransformerPE

#: feature wrappers timm's ViTs support with features_only (the ones vispe's support too)
FEATURE_CLASSES = ('getter', 'hook', 'fx')


# --- weights --------------------------------------------------------------------------------------------------------
def _strip_prefix(state: dict[str, torch.Tensor], model_keys: set) -> dict[str, torch.Tensor]:
    """``state`` without an mmengine checkpoint's ``backbone.`` prefix, when that is what fits the model."""
    if any(k in model_keys for k in state) or not any(k.startswith('backbone.') for k in state):
        return state
    return {k[len('backbone.') :]: v for k, v in state.items() if k.startswith('backbone.')}


def weights_file(cfg: dict[str, Any]) -> str:
    """The weights a config's ``file`` names: the file, or a folder's model.safetensors or pytorch_model.bin."""
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
    """Load ``state`` into ``model`` strictly but for the head; returns the keys left fresh.

    Any other mismatch raises ``CheckpointError`` naming what differs, the model untouched. A head of another shape
    stays at its initialisation, with a warning.
    """
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


def load_pretrained(model: VisionTransformerPE, cfg: dict[str, Any]) -> None:
    """``pretrained=True``: the weights the config names, strictly; ValueError when it names none (vispe ships none)."""
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


# --- pretrained configs ---------------------------------------------------------------------------------------------
def describe_model_cfg(model: VisionTransformerPE, cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` made to describe ``model``: its input size (channels, img_size) and class count."""
    cfg = dict(cfg)
    img_size = tuple(model.patch_embed.img_size) if model.patch_embed.img_size is not None else cfg['input_size'][1:]
    cfg['input_size'] = (model.patch_embed.proj.in_channels, *img_size)
    cfg['num_classes'] = model.num_classes
    return cfg


# --- features_only --------------------------------------------------------------------------------------------------
def check_feature_cls(name: str, feature_cls: Any) -> Any:
    """``feature_cls`` if timm's ViTs support it with features_only (``FEATURE_CLASSES``, a class); else ValueError."""
    if isinstance(feature_cls, str) and feature_cls.lower() not in FEATURE_CLASSES:
        raise ValueError(
            f'{name}: features_only supports feature_cls {list(FEATURE_CLASSES)} (as timm ViTs do; getter is the '
            f"default, giving NCHW maps), got {feature_cls!r}: 'list' and 'dict' need a model whose stages are its "
            'direct children, which a ViT is not'
        )
    return feature_cls


def split_feature_args(name: str, kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Pop ``features_only`` and the feature wrapper's arguments from ``kwargs``, checking ``feature_cls``."""
    features_only = kwargs.pop('features_only', False)
    feature_cfg: dict[str, Any] = {
        k: kwargs.pop(k) for k in ('out_indices', 'feature_cls', 'output_fmt') if k in kwargs
    }
    if features_only:
        check_feature_cls(name, feature_cfg.get('feature_cls', 'getter'))
    return features_only, feature_cfg


def wrap_features(model: VisionTransformerPE, name: str, feature_cls: Any = 'getter', **feature_cfg: Any) -> nn.Module:
    """timm's feature wrapper around a vispe ViT, carrying the model's pretrained config."""
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


def load_checkpoint_into(model: VisionTransformerPE, path: str) -> None:
    """Load a state dict, safetensors file or training checkpoint into ``model``, strictly (``load_vispe_weights``).

    A training checkpoint's mismatch also names the backbone arguments its config had; its record of the training data
    sets the encodings' training grid (a warning where ``img_size`` differs).
    """
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
        trained = trained_backbone(ckpt)
        if trained is None:
            raise
        args = ', '.join(f'{k}={v!r}' for k, v in trained.items())
        raise CheckpointError(f'{error}. Its training config built the backbone with: {args}') from None
    meta = ckpt.get('meta') or {}
    for note in align_training_grid(model, {}, meta):  # strategies scale from what the checkpoint trained on
        warnings.warn(f'{path}: {note}', UserWarning, stacklevel=3)


def trained_backbone(ckpt: dict[str, Any]) -> dict[str, Any] | None:
    """The ``model.backbone`` arguments of the config a checkpoint records, or None; no file beside it is read."""
    from vispe.engine.config_record import recorded_config_or_none

    cfg = recorded_config_or_none(ckpt)
    backbone = cfg.get('model', {}).get('backbone') if cfg is not None else None
    return dict(backbone) if isinstance(backbone, dict) else None


__all__ = [
    'FEATURE_CLASSES',
    'check_feature_cls',
    'describe_model_cfg',
    'load_checkpoint_into',
    'load_pretrained',
    'load_vispe_weights',
    'split_feature_args',
    'trained_backbone',
    'weights_file',
    'wrap_features',
]
