"""timm's Eva-class ViTs (naver RoPE-ViT ``vit_*_rope_*``, DINOv3 ``vit_*_dinov3*``) as ``VisionTransformerPE``, state
dicts mapped onto vispe's keys so the converted model gives timm's outputs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

import timm
import torch
from torch import nn

from vispe.backbones.timm_interop.names import is_vispe_name
from vispe.backbones.vit import VisionTransformerPE, apply_encoding
from vispe.encodings.base import Encoding

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
            if timm.is_model(base) and timm.is_model(name) and not is_vispe_name(name):
                return base, encs
    return None


def _learned_key(prefix: str, encodings: nn.ModuleDict, role: str, picks: Callable[[Encoding], bool]) -> str:
    """The state-dict key of the one learned parameter of the encoding ``picks`` selects; ValueError naming ``role``."""
    for name, enc in encodings.items():
        params = [n for n, _ in enc.named_parameters()] if isinstance(enc, Encoding) and picks(enc) else []
        if len(params) == 1:
            return f'{prefix}{name}.{params[0]}'
    raise ValueError(
        f'the Eva weights hold {role}, which none of the encodings {list(encodings)} learns; build the model with '
        'the encodings its name implies (vispe.create_model of the timm name)'
    )


def convert_eva_rope_state_dict(
    state_dict: dict[str, torch.Tensor], model: VisionTransformerPE
) -> dict[str, torch.Tensor]:
    """Map an Eva RoPE-ViT state dict onto ``model``'s keys: the table, per-block rotary frequencies and layer scale."""
    out = {}
    for key, value in state_dict.items():
        if key == 'rope.freqs':  # (2, depth, H, d/2) -> per block (2, H, d/2)
            for i, attn in enumerate(model.attentions()):
                rotary = _learned_key(f'blocks.{i}.attn.pe.', attn.pe, key, lambda e: 'rotate' in e.active_hooks())
                out[rotary] = value[:, i]
        elif key == 'pos_embed':
            out[_learned_key('pe.', model.pe, key, lambda e: e.learned_pos_embed)] = value
        else:
            out[key.replace('.gamma_1', '.ls1.gamma').replace('.gamma_2', '.ls2.gamma')] = value
    return out


def from_eva_rope(model_name: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformerPE:
    """Build timm's naver RoPE-ViT ``model_name`` (pretrained if asked) and return the vispe equivalent."""
    names = eva_rope_base(model_name)
    if names is None:
        raise ValueError(f"{model_name} is not one of timm's naver RoPE-ViT names (vit_*_rope_*)")
    base, encs = names
    eva = timm.create_model(model_name, pretrained=pretrained, **kwargs)
    vit_kwargs = {k: v for k, v in kwargs.items() if k not in ('rope_temperature', 'rope_type')}
    vit = timm.create_model(
        base, pretrained=False, init_values=1e-5, global_pool=eva.global_pool, no_embed_class=True, **vit_kwargs
    )
    vit = apply_encoding(vit, encs)
    vit.load_state_dict(convert_eva_rope_state_dict(eva.state_dict(), vit), strict=True)
    return vit


# --- timm's DINOv3 models (timm's Eva class with RotaryEmbeddingDinoV3) -> VisionTransformerPE ---------------------
def is_eva_dinov3(model_name: str) -> bool:
    """Whether ``model_name`` is one of timm's DINOv3 names (``vit_*_patch16_dinov3*``, timm's Eva class)."""
    name = model_name.split('.')[0]
    return name.startswith('vit_') and '_dinov3' in name and timm.is_model(name) and not is_vispe_name(name)


def rotate_half_order(head_dim: int) -> torch.Tensor:
    """The channel order that turns rotate-half pairs (j, j + d/2) into vispe's interleaved pairs (2j, 2j + 1)."""
    half = torch.arange(head_dim // 2)
    return torch.stack([half, half + head_dim // 2], dim=-1).flatten()


def eva_dinov3_arguments(eva: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The VisionTransformerPE arguments and ``rope_dinov3`` options that rebuild timm's DINOv3 ``eva``, read off its
    modules; TypeError for a part vispe's blocks cannot carry."""
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
    """Map a DINOv3 Eva state dict onto VisionTransformerPE's keys.

    Layer scale is renamed; ``q_bias`` and ``v_bias`` become ``qkv.bias`` with a zero k bias (which cannot change
    attention); with ``rotate_half``, q's and k's channels are permuted into vispe's pair order (``rotate_half_order``),
    leaving every q . k unchanged.
    """
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


#: VisionTransformer arguments a DINOv3 name passes on to the vispe model as given (the rest is read off timm's model)
_DINOV3_PASSED = ('drop_rate', 'pos_drop_rate', 'proj_drop_rate', 'attn_drop_rate', 'drop_path_rate', 'dynamic_img_pad')


def from_eva_dinov3(model_name: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformerPE:
    """Build timm's DINOv3 ``model_name`` (pretrained if asked) and return the vispe equivalent, loaded strictly."""
    return convert_eva_dinov3(model_name, pretrained, **kwargs)[0]


def convert_eva_dinov3(model_name: str, pretrained: bool, **kwargs: Any) -> tuple[VisionTransformerPE, dict[str, Any]]:
    """``from_eva_dinov3``, and the ``rope_dinov3`` spec it built."""
    if not is_eva_dinov3(model_name):
        raise ValueError(f"{model_name} is not one of timm's DINOv3 names (vit_*_dinov3*)")
    eva: Any = timm.create_model(model_name, pretrained=pretrained, **kwargs)  # timm's Eva
    vit_args, rope = eva_dinov3_arguments(eva)
    vit_args.update({k: v for k, v in kwargs.items() if k in _DINOV3_PASSED})
    vit = VisionTransformerPE(encoding=rope, **vit_args)
    vit.to(next(eva.parameters()).device)
    state = convert_eva_dinov3_state_dict(eva.state_dict(), vit_args['num_heads'], rotate_half=eva.rope.rotate_half)
    vit.load_state_dict(state, strict=True)
    vit.pretrained_cfg = dict(eva.pretrained_cfg)  # the preprocessing of the weights it holds (create_model)
    return vit, rope


__all__ = [
    'convert_eva_dinov3',
    'convert_eva_dinov3_state_dict',
    'convert_eva_rope_state_dict',
    'eva_dinov3_arguments',
    'eva_rope_base',
    'from_eva_dinov3',
    'from_eva_rope',
    'is_eva_dinov3',
    'rotate_half_order',
]
