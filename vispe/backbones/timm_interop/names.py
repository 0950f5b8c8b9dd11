"""What vispe knows about a timm name before building it: vispe's own names and their ``default_cfgs``, the class and
architecture a name builds, the arguments it takes, and the encoding a timm ViT's table converts to."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg
from torch import nn

from vispe.encodings.base import check_heads
from vispe.encodings.build import EncodingSpec, encodings_declaring, normalize_spec
from vispe.registry import accepted_arguments, closest

#: the timm ViT each size is built like (patch 16, 224 px): (embed_dim, depth, num_heads), as timm's vit_{size}
ARCHS: dict[str, dict[str, int]] = {
    'tiny': dict(embed_dim=192, depth=12, num_heads=3),
    'small': dict(embed_dim=384, depth=12, num_heads=6),
    'base': dict(embed_dim=768, depth=12, num_heads=12),
    'large': dict(embed_dim=1024, depth=24, num_heads=16),
}
TIMM_BASES = {size: f'vit_{size}_patch16_224' for size in ARCHS}
#: the pretrained configs of vispe's names, which timm's register_model reads (filled by register_timm_names)
default_cfgs: dict[str, Any] = {}


def vispe_name(size: str, encoding: str) -> str:
    """('tiny', 'irpe') -> 'vit_tiny_patch16_irpe_224'."""
    return f'vit_{size}_patch16_{encoding}_224'


def parse_vispe_name(name: str) -> tuple[str, str]:
    """'vit_tiny_patch16_irpe_224' -> ('tiny', 'irpe'); the inverse of ``vispe_name``."""
    size, rest = name[len('vit_') :].split('_patch16_', 1)
    return size, rest[: -len('_224')]


def is_vispe_name(name: str) -> bool:
    """Whether ``name`` (a tag after '.' ignored) is one of vispe's registered names."""
    return name.split('.')[0] in default_cfgs


def vispe_cfg(**overrides: Any) -> dict[str, Any]:
    """The pretrained config of a vispe name: vispe's eval preprocessing (bilinear short-side resize, centre crop,
    ImageNet mean / std), no weights."""
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


def registered_name(base: str, encoding: EncodingSpec) -> str | None:
    """The vispe name that builds timm's ``base`` with ``encoding``'s first encoding, or None."""
    size = next((s for s, b in TIMM_BASES.items() if b == base), None)
    cfgs = normalize_spec(encoding) if encoding is not None else []
    if size is None or not cfgs:
        return None
    name = vispe_name(size, cfgs[0]['type'])
    return name if name in default_cfgs else None


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

#: what create_model itself takes besides timm's model arguments
CREATE_MODEL_ARGUMENTS = frozenset(
    {
        'encoding',
        'pretrained',
        'checkpoint_path',
        'features_only',
        'position_sampler',
        'attention_kernel',
        'out_indices',
        'feature_cls',
        'output_fmt',
    }
)
#: what ``timm.create_model`` and the builder it calls (``build_model_with_cfg``) take themselves, beside the
#: model class's arguments
TIMM_BUILD_ARGUMENTS = frozenset(
    p.name
    for fn in (timm.create_model, build_model_with_cfg)
    for p in inspect.signature(fn).parameters.values()
    if p.kind in _NAMED and p.name not in ('model_name', 'model_cls', 'variant')
)


@dataclass(frozen=True)
class Architecture:
    """What timm builds for a name: the model class, and its width and heads where it has them (None otherwise)."""

    cls: type[nn.Module]
    embed_dim: int | None
    num_heads: int | None


@functools.cache
def architecture(model_name: str) -> Architecture | None:
    """What ``timm.create_model(model_name)`` builds (one meta-device build, cached); None when it does not build."""
    try:
        with torch.device('meta'):
            model = timm.create_model(model_name, pretrained=False)
    except Exception:  # the real build, which comes next, raises the error with its own message
        return None
    blocks = getattr(model, 'blocks', None)
    attn = getattr(blocks[0], 'attn', None) if isinstance(blocks, (nn.Sequential, nn.ModuleList)) and blocks else None
    embed_dim, num_heads = getattr(model, 'embed_dim', None), getattr(attn, 'num_heads', None)
    return Architecture(type(model), embed_dim, num_heads)


def check_model_kwargs(model_name: str, kwargs: dict[str, Any], cls: type[nn.Module] | None = None) -> None:
    """Before building ``model_name``: TypeError naming the closest valid argument for an unknown one, ValueError when a
    given embed_dim or num_heads does not divide with the name's other."""
    if all(v is None for v in kwargs.values()):  # nothing to check: no meta-device build of the name
        return
    arch = architecture(model_name.split('.')[0]) if cls is None else Architecture(cls, None, None)
    if arch is None:
        return
    accepted = accepted_arguments(arch.cls)
    if accepted is not None:
        known = accepted | TIMM_BUILD_ARGUMENTS | CREATE_MODEL_ARGUMENTS
        unknown = [k for k, v in kwargs.items() if v is not None and k not in known]
        if unknown:
            valid = sorted(accepted | CREATE_MODEL_ARGUMENTS)
            owner = arch.cls.__name__
            raise TypeError(f'{model_name} ({owner}) got unknown argument {unknown[0]!r}{closest(unknown[0], valid)}')
    given = {k: kwargs[k] for k in ('embed_dim', 'num_heads') if k in kwargs}
    if len(given) == 1 and arch.embed_dim is not None and arch.num_heads is not None:
        dims = {'embed_dim': arch.embed_dim, 'num_heads': arch.num_heads, **given}
        check_heads(dims['embed_dim'], dims['num_heads'], f'{model_name} with {given}')


def timm_table_encoding() -> str:
    """The one registered encoding holding a learned table, which a timm ViT's table converts to."""
    names = encodings_declaring('learned_pos_embed')
    if len(names) != 1:
        raise ValueError(f'a timm ViT table converts to the one encoding holding a learned table; there are {names}')
    return names[0]


__all__ = [
    'ARCHS',
    'CREATE_MODEL_ARGUMENTS',
    'TIMM_BASES',
    'TIMM_BUILD_ARGUMENTS',
    'Architecture',
    'architecture',
    'check_model_kwargs',
    'default_cfgs',
    'is_vispe_name',
    'parse_vispe_name',
    'registered_name',
    'timm_table_encoding',
    'vispe_cfg',
    'vispe_name',
]
