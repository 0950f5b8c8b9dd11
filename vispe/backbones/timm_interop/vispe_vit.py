"""vispe's timm names: ``vit_{size}_patch16_{encoding}_224`` for every 2D encoding, registered on import and listed by
``timm.list_models(module='vispe_vit')``, each with a pretrained config without weights."""

from __future__ import annotations

from typing import Any

import timm
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from torch import nn

from vispe.backbones.timm_interop.loading import describe_model_cfg, load_pretrained, split_feature_args, wrap_features
from vispe.backbones.timm_interop.names import ARCHS, TIMM_BASES, default_cfgs, parse_vispe_name, vispe_cfg, vispe_name
from vispe.backbones.vit import VisionTransformerPE
from vispe.encodings.build import list_encodings


def _create(variant: str, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """Build the vispe name ``variant`` through timm's builder; ``pretrained`` loads the configured weights."""
    size, encoding = parse_vispe_name(variant)
    features_only, feature_cfg = split_feature_args(variant, kwargs)
    args: dict[str, Any] = dict(patch_size=16, encoding=encoding, **ARCHS[size])
    args.update(kwargs)
    model = build_model_with_cfg(VisionTransformerPE, variant, pretrained=False, **args)
    if pretrained:
        load_pretrained(model, model.pretrained_cfg)
    model.pretrained_cfg = model.default_cfg = describe_model_cfg(model, model.pretrained_cfg)
    if features_only:
        return wrap_features(model, variant, **feature_cfg)
    return model


def _make_entrypoint(name: str):

    def entrypoint(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        return _create(name, pretrained=pretrained, **kwargs)

    size, encoding = parse_vispe_name(name)
    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__ = __name__
    entrypoint.__doc__ = (
        f'timm {TIMM_BASES[size]} with vispe encoding {encoding!r} (any H x W divisible by 16; no pretrained '
        'weights). Keyword arguments go to VisionTransformerPE (timm VisionTransformer arguments, encoding=...).'
    )
    return entrypoint


def register_timm_names(encodings: list[str] | None = None) -> list[str]:
    """Register a vispe name for each 2D encoding, unless timm has it; returns the names added."""
    encodings = list_encodings(ndim=2) if encodings is None else encodings
    names = [
        vispe_name(size, enc)
        for size in ARCHS
        for enc in encodings
        if not timm.is_model(vispe_name(size, enc)) or vispe_name(size, enc) in default_cfgs
    ]
    default_cfgs.update(generate_default_cfgs({name: vispe_cfg() for name in names}))
    for name in names:
        register_model(_make_entrypoint(name))
    return names


# timm's register_model reads the pretrained configs from the entrypoints' module: this one
__all__ = ['default_cfgs', 'register_timm_names']
