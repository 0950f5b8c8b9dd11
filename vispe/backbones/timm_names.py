"""What ``vispe.create_model`` knows about a timm name before building it: the class the name builds, with the
width and heads of its architecture, the arguments that class takes (so that a misspelled one is refused before
timm meets it, naming the closest valid ones), the checks of timm's VisionTransformer arguments, and timm's naver
RoPE-ViT names (timm's Eva class), which vispe builds as ``VisionTransformerPE``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, NoReturn

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


# --- timm's DINOv3 models (timm's Eva class with RotaryEmbeddingDinoV3) -> VisionTransformerPE ---------------------
def is_eva_dinov3(model_name: str) -> bool:
    """Whether ``model_name`` is one of timm's DINOv3 names (``vit_*_patch16_dinov3*``, timm's Eva class)."""
    name = model_name.split('.')[0]
    return name.startswith('vit_') and '_dinov3' in name and timm.is_model(name) and not _is_vispe(name)


def rotate_half_order(head_dim: int) -> torch.Tensor:
    """The channel order that turns rotate-half pairs (j, j + d/2) into vispe's interleaved pairs (2j, 2j + 1)."""
    half = torch.arange(head_dim // 2)
    return torch.stack([half, half + head_dim // 2], dim=-1).flatten()


def eva_dinov3_arguments(eva: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The VisionTransformerPE arguments and the ``rope_dinov3`` options that rebuild timm's DINOv3 ``eva`` (its
    modules read, not its name), or a TypeError naming the part that vispe's blocks cannot carry."""
    from timm.layers import Mlp, SwiGLU
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3
    from timm.models.eva import EvaBlock

    name = type(eva).__name__

    def refuse(part: str) -> NoReturn:
        raise TypeError(
            f'{name} with {part}: VisionTransformerPE has no counterpart, so vispe cannot carry it over; vispe '
            "converts timm's DINOv3 models as timm builds them (pre-norm blocks, fused qkv, no qk norm, no absolute "
            'table); build it without that argument'
        )

    rope = getattr(eva, 'rope', None)
    if not isinstance(rope, RotaryEmbeddingDinoV3):
        refuse(f'rotary embedding {type(rope).__name__} (rope_type other than dinov3)')
    if rope.grid_offset != 0 or rope.grid_indexing != 'ij':
        refuse(f'rope_grid_offset={rope.grid_offset}, rope_grid_indexing={rope.grid_indexing!r}')
    if getattr(eva, 'pos_embed', None) is not None:
        refuse('an absolute position table (use_abs_pos_emb=True)')
    if getattr(eva, 'attn_pool', None) is not None:
        refuse("attention pooling (global_pool='map')")
    if getattr(eva, 'patch_drop', None) is not None and not isinstance(eva.patch_drop, nn.Identity):
        refuse('patch dropout (patch_drop_rate > 0)')
    blocks = list(eva.blocks)
    block = blocks[0]
    if any(type(b) is not EvaBlock for b in blocks):
        refuse('post-norm blocks (use_post_norm=True)')
    attn, mlp = block.attn, block.mlp
    dim, heads = eva.embed_dim, attn.num_heads
    if attn.qkv is None or attn.qkv.weight.shape[0] != 3 * dim:
        refuse('separate or grouped q, k, v projections (qkv_fused=False, num_kv_heads, attn_head_dim)')
    if not isinstance(attn.q_norm, nn.Identity) or not isinstance(attn.norm, nn.Identity):
        refuse('a norm inside attention (qk_norm, scale_attn_inner)')
    if getattr(attn, 'gate', None) is not None:
        refuse("gated attention (attn_type='gated')")
    if type(mlp) not in (Mlp, SwiGLU):
        refuse(f'MLP {type(mlp).__name__}')
    if not isinstance(getattr(mlp, 'norm', nn.Identity()), nn.Identity):
        refuse('a norm inside the MLP (scale_mlp=True)')
    if (block.gamma_1 is None) != (block.gamma_2 is None):
        refuse('layer scale on attention only (attn_only_layer_scale=True)')
    hidden = (mlp.fc1_g if isinstance(mlp, SwiGLU) else mlp.fc1).out_features
    norm = block.norm1
    vit = dict(
        img_size=tuple(eva.patch_embed.img_size),
        patch_size=tuple(eva.patch_embed.patch_size),
        in_chans=eva.patch_embed.proj.in_channels,
        num_classes=eva.num_classes,
        global_pool=eva.global_pool,
        embed_dim=dim,
        depth=len(blocks),
        num_heads=heads,
        mlp_ratio=hidden / dim,
        qkv_bias=attn.q_bias is not None,
        init_values=1.0 if block.gamma_1 is not None else None,  # the values are loaded
        class_token=eva.cls_token is not None,
        reg_tokens=0 if eva.reg_token is None else eva.reg_token.shape[1],
        no_embed_class=True,
        pre_norm=not isinstance(eva.norm_pre, nn.Identity),
        final_norm=not isinstance(eva.norm, nn.Identity),
        fc_norm=not isinstance(eva.fc_norm, nn.Identity),
        dynamic_img_size=True,
        norm_layer=functools.partial(norm.__class__, eps=norm.eps),
        act_layer=type(mlp.act),
        mlp_layer=type(mlp),
    )
    encoding = dict(
        type='rope_dinov3',
        base=rope.temperature,
        min_period=rope.min_period,
        max_period=rope.max_period,
        normalize=rope.normalize_coords,
        shift=rope.shift_coords,
        jitter=rope.jitter_coords,
        rescale=rope.rescale_coords,
    )
    return vit, {k: v for k, v in encoding.items() if v is not None or k == 'rescale'}  # rescale None: off


def convert_eva_dinov3_state_dict(
    state_dict: dict[str, torch.Tensor], num_heads: int, rotate_half: bool = True
) -> dict[str, torch.Tensor]:
    """Map a DINOv3 Eva state dict (timm's ``vit_*_dinov3*``) onto VisionTransformerPE's keys: layer scale
    ``gamma_1`` / ``gamma_2`` -> ``ls1.gamma`` / ``ls2.gamma``; ``q_bias`` and ``v_bias`` -> ``qkv.bias`` with
    Eva's k bias, 0 (a k bias adds the same term to every logit of a query, so it could not change the attention
    anyway); with ``rotate_half``, q's and k's channels of each head put in vispe's pair order (``rotate_half_order``,
    the same permutation for q and k, so every q . k is unchanged)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.endswith(('.attn.q_bias', '.attn.v_bias')):
            continue
        key = key.replace('.gamma_1', '.ls1.gamma').replace('.gamma_2', '.ls2.gamma')
        if key.endswith('.attn.qkv.weight'):
            prefix = key[: -len('weight')]
            weight = value
            q_bias = state_dict.get(prefix.replace('qkv.', 'q_bias'))
            v_bias = state_dict.get(prefix.replace('qkv.', 'v_bias'))
            bias = None
            if q_bias is not None and v_bias is not None:
                bias = torch.cat([q_bias, torch.zeros_like(q_bias), v_bias])
            if rotate_half:
                dim = weight.shape[0] // 3
                order = rotate_half_order(dim // num_heads)
                per_head = (torch.arange(num_heads)[:, None] * (dim // num_heads) + order).flatten()
                rows = torch.cat([per_head, per_head + dim, torch.arange(2 * dim, 3 * dim)])
                weight = weight[rows]
                bias = None if bias is None else bias[rows]
            out[prefix + 'weight'] = weight
            if bias is not None:
                out[prefix + 'bias'] = bias
            continue
        out[key] = value
    return out


__all__ = [
    'Architecture',
    'architecture',
    'check_model_kwargs',
    'check_vit_kwargs',
    'convert_eva_dinov3_state_dict',
    'convert_eva_rope_state_dict',
    'eva_dinov3_arguments',
    'eva_rope_base',
    'is_eva_dinov3',
    'rotate_half_order',
    'timm_table_encoding',
]
