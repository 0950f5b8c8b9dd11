"""What ``vispe.create_model`` knows about a timm name before building it: the class the name builds, with the
width and heads of its architecture, the arguments that class takes (so that a misspelled one is refused before
timm meets it, naming the closest valid ones), the checks of timm's VisionTransformer arguments, and timm's naver
RoPE-ViT names (timm's Eva class), which vispe builds as ``VisionTransformerPE``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import timm
import torch
from timm.models import VisionTransformer, build_model_with_cfg
from torch import nn

from vispe.backbones.common import check_rates, check_size
from vispe.encodings.base import check_heads
from vispe.encodings.build import encodings_declaring
from vispe.registry import accepted_arguments, closest

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

#: what create_model itself takes besides timm's model arguments
CREATE_MODEL_ARGUMENTS = frozenset(
    {
        'encoding',
        'pretrained',
        'checkpoint_path',
        'features_only',
        'position_sampler',
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
#: timm's VisionTransformer defaults, for the checks of a VisionTransformerPE's arguments
TIMM_VIT_DEFAULTS = {
    k: p.default for k, p in inspect.signature(VisionTransformer.__init__).parameters.items() if k != 'self'
}


@dataclass(frozen=True)
class Architecture:
    """What timm builds for a name: the model class, and its width and heads where it has them (None otherwise)."""

    cls: type[nn.Module]
    embed_dim: int | None
    num_heads: int | None


@functools.cache
def architecture(model_name: str) -> Architecture | None:
    """What ``timm.create_model(model_name)`` builds, found by building it once on the meta device (no memory, no
    weights; cached per name); None when it does not build (an unknown name: the real build then says why)."""
    try:
        with torch.device('meta'):
            model = timm.create_model(model_name, pretrained=False)
    except Exception:  # the real build, which comes next, raises the error with its own message
        return None
    blocks = getattr(model, 'blocks', None)
    attn = getattr(blocks[0], 'attn', None) if isinstance(blocks, (nn.Sequential, nn.ModuleList)) and blocks else None
    embed_dim, num_heads = getattr(model, 'embed_dim', None), getattr(attn, 'num_heads', None)
    return Architecture(type(model), embed_dim, num_heads)


def check_vit_kwargs(kwargs: dict[str, Any], defaults: bool) -> None:
    """Before timm builds a ViT from ``kwargs``: img_size and patch_size that are sizes, drop rates in [0, 1], and
    num_heads dividing embed_dim (with ``defaults``, timm's VisionTransformer defaults fill in what is not given;
    without, only given pairs)."""
    for name in ('img_size', 'patch_size'):
        if name in kwargs:
            check_size('VisionTransformerPE', name, kwargs[name])
    check_rates('VisionTransformerPE', **{k: v for k, v in kwargs.items() if k.endswith('_rate')})
    args = {**TIMM_VIT_DEFAULTS, **kwargs} if defaults else kwargs
    if 'embed_dim' in args and 'num_heads' in args:
        check_heads(args['embed_dim'], args['num_heads'], 'VisionTransformerPE')


def check_model_kwargs(model_name: str, kwargs: dict[str, Any], cls: type[nn.Module] | None = None) -> None:
    """Before ``create_model`` builds ``model_name`` (a class ``cls``; None: the one timm builds for the name) from
    ``kwargs``: a TypeError naming the closest valid arguments for one the class, timm's builder and create_model
    all do not take (a None value passes: timm drops those), and a ValueError when a given embed_dim or num_heads
    does not divide with the name's other one (a given pair is ``check_vit_kwargs``'s)."""
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
    """The encoding a plain timm ViT's learned table converts to by default: the one registered encoding holding a
    learned table (``Encoding.learned_pos_embed``)."""
    names = encodings_declaring('learned_pos_embed')
    if len(names) != 1:
        raise ValueError(f'a timm ViT table converts to the one encoding holding a learned table; there are {names}')
    return names[0]


# --- timm's naver-ai RoPE-ViT models (timm's Eva class) -> VisionTransformerPE -------------------------------------
_EVA_ROPE_SUFFIXES = {  # longest first
    '_rope_mixed_ape': ['rope_mixed', 'ape_learned'],
    '_rope_mixed': ['rope_mixed'],
    '_rope_ape': ['rope_axial', 'ape_learned'],
    '_rope': ['rope_axial'],
}


def eva_rope_base(model_name: str) -> tuple[str, list[str]] | None:
    """'vit_small_patch16_rope_mixed_224' -> ('vit_small_patch16_224', ['rope_mixed']); None for other names."""
    for suffix, encs in _EVA_ROPE_SUFFIXES.items():
        if suffix + '_' in model_name and model_name.startswith('vit_'):
            base = model_name.replace(suffix + '_', '_', 1)
            name = model_name.split('.')[0]
            if timm.is_model(base) and timm.is_model(name) and not _is_vispe(name):
                return base, encs
    return None


def _is_vispe(name: str) -> bool:
    from vispe.backbones.vispe_vit import default_cfgs

    return name in default_cfgs


def convert_eva_rope_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map an Eva RoPE-ViT state dict (timm naver models) onto VisionTransformerPE's keys."""
    out = {}
    for key, value in state_dict.items():
        if key == 'rope.freqs':  # (2, depth, H, d/2) -> per block (2, H, d/2)
            for i in range(value.shape[1]):
                out[f'blocks.{i}.attn.pe.rope_mixed.freqs'] = value[:, i]
        elif key == 'pos_embed':
            out['pe.ape_learned.pos_embed'] = value
        else:
            out[key.replace('.gamma_1', '.ls1.gamma').replace('.gamma_2', '.ls2.gamma')] = value
    return out


__all__ = [
    'Architecture',
    'architecture',
    'check_model_kwargs',
    'check_vit_kwargs',
    'convert_eva_rope_state_dict',
    'eva_rope_base',
    'timm_table_encoding',
]
