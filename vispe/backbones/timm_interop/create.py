"""``vispe.create_model``: any timm ViT name with a vispe encoding, timm's Eva RoPE-ViT and DINOv3 names converted,
vispe's own names and ``local-dir:`` folders."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from vispe.attention import set_attention_kernel
from vispe.backbones.common import check_vit_kwargs
from vispe.backbones.timm_interop.eva import convert_eva_dinov3, eva_rope_base, from_eva_rope, is_eva_dinov3
from vispe.backbones.timm_interop.loading import (
    describe_model_cfg,
    load_checkpoint_into,
    split_feature_args,
    weights_file,
    wrap_features,
)
from vispe.backbones.timm_interop.names import (
    check_model_kwargs,
    default_cfgs,
    parse_vispe_name,
    registered_name,
    timm_table_encoding,
    vispe_cfg,
)
from vispe.backbones.vit import VisionTransformerPE, apply_encoding
from vispe.encodings.build import EncodingSpec, normalize_spec
from vispe.flex import check_kernel
from vispe.positions import build_position_sampler
from vispe.registry import closest


def create_model(
    model_name: str,
    encoding: EncodingSpec = 'default',
    pretrained: bool = False,
    checkpoint_path: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build any timm ViT name with ``encoding``; extra keyword arguments go to ``timm.create_model``.

    ``encoding='default'`` keeps what the name implies (a plain ViT's learned table, a ``*_rope_*`` name's rotary
    encoding). ``features_only=True`` returns timm's feature wrapper; ``'local-dir:PATH'`` rebuilds a ``save_for_hf``
    folder. ``checkpoint_path`` is loaded strictly (only a head of another ``num_classes`` may differ, left fresh with
    a warning). A converted model's ``pretrained_cfg`` is its own (its vispe name, input size, classes; no hub id).
    """
    native = model_name.split('.')[0] in default_cfgs
    if model_name.startswith('local-dir:'):
        from timm.models._hub import load_model_config_from_path

        cfg, architecture, model_args = load_model_config_from_path(model_name[len('local-dir:') :])
        native = architecture in default_cfgs
        if not native:
            if encoding != 'default':
                kwargs['encoding'] = encoding
            return from_local_dir(cfg, architecture, model_args, pretrained, checkpoint_path, **kwargs)
    check_model_name(model_name)
    features_only, feature_kwargs = split_feature_args(model_name, kwargs)
    overlay = kwargs.get('pretrained_cfg_overlay') or {}
    if pretrained and isinstance(overlay, dict) and overlay.get('file'):
        weights_file(overlay)  # a missing file, named before timm's loader gets there (timm names too)
    sampler = kwargs.pop('position_sampler', None)
    mixed = kwargs.pop('mixed_sizes', 'pad'), kwargs.pop('pack_tokens', None)
    kernel = check_kernel(kwargs.pop('attention_kernel', 'auto'))
    check_vit_kwargs(kwargs, defaults=False)
    check_model_kwargs(model_name, kwargs, VisionTransformerPE if native else None)
    if native and encoding != 'default':
        kwargs['encoding'] = encoding
    eva = eva_rope_base(model_name)
    model: nn.Module
    dinov3 = is_eva_dinov3(model_name)
    dinov3_spec: dict[str, Any] = {}
    if eva is not None:
        model = from_eva_rope(model_name, pretrained=pretrained, **kwargs)
    elif dinov3:
        model, dinov3_spec = convert_eva_dinov3(model_name, pretrained, **kwargs)
    else:
        model = timm.create_model(model_name, pretrained=pretrained, **kwargs)
    if not native:
        source_cfg = dict(getattr(model, 'pretrained_cfg', {}) or {})
        if encoding == 'default' and not isinstance(model, VisionTransformerPE):  # a plain timm ViT
            encoding = timm_table_encoding() if getattr(model, 'pos_embed', None) is not None else None
        if encoding != 'default':  # None too: a vispe model without an encoding
            model = apply_encoding(model, encoding)
    if not isinstance(model, VisionTransformerPE):  # vispe's names build one, and apply_encoding converts to one
        raise TypeError(f'{model_name} built a {type(model).__name__}, where vispe expects a VisionTransformerPE')
    if not native:
        base = eva[0] if eva else model_name.split('.')[0]
        spec = eva[1] if eva and encoding == 'default' else encoding
        if dinov3 and encoding == 'default':
            spec = dinov3_spec
        adopt_converted(model, base, spec, source_cfg, pretrained, kwargs)
    if sampler is not None:
        model.position_sampler = build_position_sampler(sampler, grid=model.patch_embed.grid_size)
    model.set_mixed_sizes(*mixed)
    set_attention_kernel(model, kernel)
    if checkpoint_path is not None:
        load_checkpoint_into(model, checkpoint_path)
    if features_only:
        return wrap_features(model, model_name, **feature_kwargs)
    return model


def check_model_name(model_name: str) -> None:
    """ValueError naming the closest known names for a name timm does not know; hub names are left to timm."""
    if ':' in model_name or timm.is_model(model_name.split('.')[0]):
        return
    raise ValueError(
        f'unknown model {model_name!r}{closest(model_name.split(".")[0], timm.list_models())} (the names: '
        "timm.list_models('vit_*'), vispe's among them)"
    )


def adopt_converted(
    model: VisionTransformerPE,
    base: str,
    encoding: EncodingSpec,
    source_cfg: dict[str, Any],
    pretrained: bool,
    model_args: dict[str, Any],
) -> None:
    """Give a converted timm ViT its own pretrained config and the model arguments that rebuild it (``save_for_hf``)."""
    name = registered_name(base, encoding)
    if pretrained:  # the weights are timm's: their preprocessing, not their source, which is another model
        cfg = {k: v for k, v in source_cfg.items() if k not in ('hf_hub_id', 'url', 'file', 'state_dict', 'source')}
    else:
        cfg = vispe_cfg()
    cfg.update(architecture=name or base, tag=None)
    model.pretrained_cfg = model.default_cfg = describe_model_cfg(model, cfg)
    args = {**(getattr(model, '_model_args', None) or {}), **model_args}
    args.pop('encoding', None)
    spec = normalize_spec(encoding)
    if name is None or spec != [{'type': parse_vispe_name(name)[1]}]:
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
    """``create_model('local-dir:PATH')`` of a converted timm name, which timm cannot rebuild; ``pretrained`` loads the
    folder's weights strictly."""
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


__all__ = ['adopt_converted', 'check_model_name', 'create_model', 'from_local_dir']
