"""vispe's timm names: ``vit_{size}_patch16_{encoding}_224`` for every 2D encoding, as first-class timm models.

Importing vispe registers them (``vispe.TIMM_NAMES``); timm lists them under this module's name
(``timm.list_models(module='vispe_vit')``). Each has its own pretrained config in ``default_cfgs``: architecture = its
name, no weights (no hub id, url or file: vispe ships none), the preprocessing vispe's image pipeline uses
(ImageNet mean / std, bilinear resize of the short side then a centre crop of the same size, so ``crop_pct`` 1.0)
and 1000 classes. A built model's ``pretrained_cfg`` describes that model: its input size and class count, and
with ``pretrained_cfg_overlay=dict(file=...)`` or ``local-dir:`` the weights it was loaded from.

Weights load strictly (``vispe.backbones.timm_interop.loading``): every key and shape must fit, except a classifier
head of another size when the model is built with another ``num_classes`` (that head starts afresh, and a warning
says so). A vispe state dict, an mmengine checkpoint of ``tools/train.py`` (``state_dict`` with the ``backbone.``
prefix of the classifier task) and a ``timm.models.save_for_hf`` folder all load. ``features_only=True`` honours
timm's ``feature_cls``: 'getter' (the default, as timm's ViTs), 'hook' and 'fx'; 'list' and 'dict' are refused, as
timm refuses them for its ViTs.
"""

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
    """Build the vispe name ``variant`` through timm's builder (its size's architecture and its encoding, overridden
    by ``kwargs``), its weights with ``pretrained``, its pretrained config describing the model; with
    ``features_only``, timm's feature wrapper around it."""
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
    """timm's entrypoint for the vispe name ``name``, named and documented as timm lists it."""

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
    """Register ``vit_{size}_patch16_{encoding}_224`` (with its pretrained config) for each 2D encoding; a name
    timm already has is left to timm. Returns the names added."""
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
