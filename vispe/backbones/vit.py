"""timm's VisionTransformer with positions and encoding hooks.

``apply_encoding`` converts any plain timm ViT (weights kept) in place or by copy; ``create_model`` builds a
timm name with an encoding; importing this module registers timm names such as
``vit_small_patch16_rope_mixed_224`` that do not exist in timm yet. The result always runs with a dynamic
image size: any H x W divisible by the patch size, non-square included.
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

import timm
import torch
from timm.layers import Format, resample_abs_pos_embed
from timm.models import VisionTransformer
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import Block
from torch import nn
from torch.utils.checkpoint import checkpoint

from vispe.attention import Attention
from vispe.backbones.common import (
    EncodingHost,
    build_backbone_encodings,
    check_img_size,
    check_input_dtype,
    check_rates,
    check_size,
    use_patch_conv,
)
from vispe.encodings.build import EncodingSpec, check_heads, normalize_spec
from vispe.positions import Positions, PositionSampler, build_position_sampler, grid_positions, is_symbolic
from vispe.registry import MODELS, accepted_arguments, closest


class PEBlock(Block):
    """timm's pre-norm Block whose attention receives the positions."""

    def forward(self, x, pos: Positions | None = None, attn_mask=None, is_causal: bool = False):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), pos, attn_mask=attn_mask, is_causal=is_causal)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def pe_blocks(
    embed_dim: int, num_heads: int, mlp_ratio: float, drop_path_rate: float, per_layer: list[nn.ModuleDict]
) -> nn.ModuleList:
    """Pre-norm blocks on vispe's attention, one per entry of ``per_layer`` (that layer's encodings), with drop
    path rising linearly to ``drop_path_rate``: the blocks of the point and multi-view transformers."""
    rates = torch.linspace(0, drop_path_rate, len(per_layer)).tolist()
    blocks = nn.ModuleList()
    for rate, encodings in zip(rates, per_layer):
        block = PEBlock(embed_dim, num_heads, mlp_ratio, qkv_bias=True, drop_path=rate)
        # timm's Block passes arguments vispe's Attention does not take to attn_layer, so swap it in after
        block.attn = Attention(embed_dim, num_heads, qkv_bias=True, encodings=encodings)
        blocks.append(block)
    return blocks


@MODELS.register_module()
class VisionTransformerPE(EncodingHost, VisionTransformer):
    """A timm ``VisionTransformer`` driven by vispe encodings.

    Model-level encodings (embed, after_block hooks) live in ``self.pe``; per-layer ones (rotate,
    logit_bias, value_term) in ``blocks[i].attn.pe``. Build it with ``VisionTransformerPE(encoding=...,
    **timm_vit_kwargs)``, ``vispe.create_model`` or ``vispe.apply_encoding``.

    ``position_sampler`` (e.g. ``RPE2D``, built from ``dict(type='rpe2d', max_grid=(16, 16))``) replaces the grid
    positions in training only (``self.training``); evaluation always uses the plain grid.

    Tracing and export, every registered 2D encoding: ``torch.fx`` (timm's forward_fx / backward_fx contracts, and a
    plain ``symbolic_trace``) gives one graph for every image size, equal to the eager model bit for bit;
    ``torch.export`` with dynamic H and W gives one program for every size; the FX graph can be scripted
    (``torch.jit.script(fx_graph)``, timm's forward_fx_torchscript). Traced graphs never split the attention into
    query chunks (``vispe.attention.may_chunk``), and a position sampler or a non-default resolution strategy
    needs concrete sizes (eager or torch.compile).

    TorchScript: ``torch.jit.script(model)`` (timm's torchscript contract) scripts the model's FX graph: TorchScript
    cannot compile the Python forward itself (its ``Positions`` dataclass has fields with no TorchScript type, a
    ``Hashable`` key and a tuple of any length; the hooks are dispatched by filtering a ModuleDict on frozensets of
    hook names into lists of modules of different classes; tables live in Python dict caches filled by closures;
    ``position_sampler`` is any callable), so ``__prepare_scriptable__`` hands it ``torch.fx.symbolic_trace`` of the
    model, the same function at every input size, which scripts, saves with ``torch.jit.save`` and loads without
    vispe. The scripted module has ``forward`` only, in the mode it was scripted in, and it cannot take a position
    sampler in training or a non-default resolution strategy (both need concrete sizes: an error says so).
    """

    #: training-time position sampler ``(pos, batch_size) -> Positions``, or None
    position_sampler: PositionSampler | None = None
    #: timm's ViT stem (its ``group_matcher``); EncodingHost adds the model-level encodings ``pe``
    stem_prefixes = ('cls_token', 'reg_token', 'pos_embed', 'patch_embed', 'norm_pre')

    def __init__(self, encoding: EncodingSpec = 'ape_learned', position_sampler=None, **kwargs: Any) -> None:
        _check_vit_kwargs(kwargs, defaults=True)
        super().__init__(**kwargs)
        apply_encoding(self, encoding, position_sampler=position_sampler)

    def __prepare_scriptable__(self) -> nn.Module:
        """What ``torch.jit.script(model)`` compiles: the model's FX graph (the class docstring says why)."""
        if self.training and self.position_sampler is not None:
            raise TypeError(
                'torch.jit.script: a position sampler draws new positions from concrete sizes at every training step, '
                'which a scripted graph cannot; script the model in eval mode (model.eval()), or without the sampler'
            )
        try:
            return torch.fx.symbolic_trace(self)
        except Exception as error:  # a resolution strategy or encoding option that needs concrete sizes
            raise TypeError(
                f'torch.jit.script: {type(self).__name__} with encodings {self.encoding_names} scripts through its FX '
                f'graph, and tracing failed ({type(error).__name__}: {error}); the default configuration of every '
                'registered encoding traces: drop the non-default resolution strategy or option, or use torch.compile'
            ) from error

    # no_weight_decay and group_matcher: EncodingHost's, from the encodings' declarations

    # --- forward ---------------------------------------------------------------------------------------------
    def _check_size(self, height: int, width: int) -> None:
        ph, pw = self.patch_embed.patch_size
        if not self.patch_embed.dynamic_img_pad and (height % ph or width % pw):
            raise ValueError(
                f'image size {height}x{width} is not divisible by the patch size {ph}x{pw}: resize or crop it to a '
                f'multiple of the patch (e.g. {height // ph * ph}x{width // pw * pw}), or build the model with '
                'dynamic_img_pad=True to pad the borders'
            )

    def tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, Positions]:
        """Images (B, C, H, W) -> tokens (B, prefix + h*w, D) with embed hooks applied, and their positions.

        Traced (FX, torch.export), h and w are symbolic: the positions then carry no cache key and the graph builds
        every table at the size of the call. The input checks need concrete values and are left to the eager model
        (an FX graph still has timm's PatchEmbed assert on divisibility)."""
        if not is_symbolic(x):
            check_input_dtype('VisionTransformerPE', x, self.patch_embed.proj.weight)
        if not is_symbolic(x.shape[-2], x.shape[-1]):
            self._check_size(x.shape[-2], x.shape[-1])
        x = self.patch_embed(x)  # (B, h, w, D)
        B, h, w, D = x.shape
        pos = grid_positions(h, w, self.num_prefix_tokens, x.device)
        if self.training and self.position_sampler is not None:
            # per-sample coords (B, h*w, 2); pos.grid stays (h, w), so conv encodings still see the image grid
            pos = self.position_sampler(pos, B)
        x = x.reshape(B, h * w, D)
        x = self.encoding_stack.embed(x, pos)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        x = torch.cat(prefix + [x], dim=1) if prefix else x
        return self.norm_pre(self.pos_drop(x)), pos

    def run_block(self, i: int, x: torch.Tensor, pos: Positions, attn_mask=None, is_causal: bool = False):
        blk = self.blocks[i]
        if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
            x = checkpoint(blk, x, pos, attn_mask, is_causal, use_reentrant=False)
        else:
            x = blk(x, pos, attn_mask=attn_mask, is_causal=is_causal)
        return self.encoding_stack.after_block(i, x, pos)

    def forward_features(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        x, pos = self.tokens(x)
        for i in range(len(self.blocks)):
            x = self.run_block(i, x, pos, attn_mask, is_causal)
        return self.norm(x)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = 'NCHW',
        intermediates_only: bool = False,
        output_dict: bool = False,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ):
        """timm's forward_intermediates contract, with positions threaded through the blocks."""
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x, pos = self.tokens(x)
        npt = self.num_prefix_tokens
        intermediates, prefixes = [], []
        for i in range(max_index + 1 if stop_early else len(self.blocks)):
            x = self.run_block(i, x, pos, attn_mask, is_causal)
            if i in take_indices:
                y = self.norm(x) if norm else x
                prefixes.append(y[:, :npt])
                y = y[:, npt:]
                if output_fmt == 'NCHW':
                    y = y.reshape(y.shape[0], *pos.grid, -1).permute(0, 3, 1, 2).contiguous()
                intermediates.append(y)
        if output_dict:
            out: dict[str, Any] = {'image_intermediates': intermediates}
            if return_prefix_tokens and npt:
                out['image_intermediates_prefix'] = prefixes
            if not intermediates_only:
                out['image_features'] = self.norm(x)
            return out
        if return_prefix_tokens and npt:
            intermediates = list(zip(intermediates, prefixes))
        return intermediates if intermediates_only else (self.norm(x), intermediates)


def _prefix_tokens_absorb_pos(model: VisionTransformer) -> None:
    """Fold the prefix tokens' absolute positions into the tokens themselves (same function, no table)."""
    if model.pos_embed is None or model.no_embed_class:
        return
    offset = 0
    with torch.no_grad():
        for token in (model.cls_token, model.reg_token):
            if token is not None:
                n = token.shape[1]
                token.add_(model.pos_embed[:, offset : offset + n])
                offset += n


def _strip_encodings(model: VisionTransformer) -> torch.Tensor | None:
    """Remove the model's absolute table and vispe encodings; return the old patch table (1, h*w, D) if any."""
    table = None
    if isinstance(model, VisionTransformerPE):  # during VisionTransformerPE.__init__ there is no pe yet
        if 'ape_learned' in getattr(model, 'pe', {}):
            table = model.pe['ape_learned'].pos_embed.data
    elif model.pos_embed is not None:
        _prefix_tokens_absorb_pos(model)
        npt = 0 if model.no_embed_class else model.num_prefix_tokens
        table = model.pos_embed.data[:, npt:]
    model.pos_embed = None
    return table


_TIMM_VIT_DEFAULTS = {
    k: p.default for k, p in inspect.signature(VisionTransformer.__init__).parameters.items() if k != 'self'
}


def _check_vit_kwargs(kwargs: dict[str, Any], defaults: bool) -> None:
    """Before timm builds a ViT from ``kwargs``: img_size and patch_size that are sizes, drop rates in [0, 1], and
    num_heads dividing embed_dim (with ``defaults``, timm's VisionTransformer defaults fill in what is not given;
    without, only given pairs)."""
    for name in ('img_size', 'patch_size'):
        if name in kwargs:
            check_size('VisionTransformerPE', name, kwargs[name])
    check_rates('VisionTransformerPE', **{k: v for k, v in kwargs.items() if k.endswith('_rate')})
    args = {**_TIMM_VIT_DEFAULTS, **kwargs} if defaults else kwargs
    if 'embed_dim' in args and 'num_heads' in args:
        check_heads(args['embed_dim'], args['num_heads'], 'VisionTransformerPE')


def _check_convertible(model: nn.Module) -> None:
    if type(model) not in (VisionTransformer, VisionTransformerPE):
        raise TypeError(
            f'apply_encoding converts timm VisionTransformer models; got {type(model).__name__}, which has its own '
            "forward. Use a plain timm ViT name (vit_*, deit_* without distillation), or one of timm's naver RoPE "
            'models through vispe.create_model.'
        )
    if not isinstance(model.patch_drop, nn.Identity):
        raise ValueError(
            'patch_drop_rate > 0 drops tokens and their positions; build the timm model with patch_drop_rate=0'
        )
    bad = [type(b).__name__ for b in model.blocks if type(b) not in (Block, PEBlock)]
    if bad:
        raise TypeError(f'apply_encoding needs timm pre-norm Blocks; this model has {sorted(set(bad))}')


def apply_encoding(
    model: VisionTransformer,
    encoding: EncodingSpec,
    copy_model: bool = False,
    position_sampler: None | dict[str, Any] | PositionSampler = None,
) -> VisionTransformerPE:
    """Convert a timm ViT to use ``encoding`` (a name, a config dict or a list of them), keeping its weights.

    The model's learned absolute table, if any, becomes the ``ape_learned`` table when that encoding is asked
    for, and is dropped otherwise; the prefix tokens' own table entries are folded into those tokens.
    ``copy_model=True`` leaves ``model`` untouched and returns a converted deep copy. ``position_sampler`` (a
    config dict such as ``dict(type='rpe2d', max_grid=(16, 16))`` or a callable) is attached for training;
    None keeps the model's current one (none for a timm model).
    """
    cfgs = normalize_spec(encoding)
    _check_convertible(model)
    if copy_model:
        model = copy.deepcopy(model)
    old_table = _strip_encodings(model)

    patch_embed = model.patch_embed
    if getattr(patch_embed, 'img_size', None) is not None and not getattr(patch_embed, 'dynamic_img_pad', False):
        check_img_size(
            'VisionTransformerPE', patch_embed.img_size, patch_embed.patch_size, ', or build with dynamic_img_pad=True'
        )
    num_heads = model.blocks[0].attn.num_heads if len(model.blocks) else 1
    grid = tuple(patch_embed.grid_size)
    model_level, per_layer = build_backbone_encodings(
        cfgs, model.embed_dim, num_heads, len(model.blocks), grid, backbone='VisionTransformerPE'
    )

    model.__class__ = VisionTransformerPE
    model.dynamic_img_size = True
    model._traits = {**getattr(model, '_traits', {}), 'fixed_input_size': False}  # timm's record of the input size
    model.patch_embed.flatten = False
    model.patch_embed.output_fmt = Format.NHWC
    model.patch_embed.strict_img_size = False
    use_patch_conv(model.patch_embed)
    device = model.patch_embed.proj.weight.device
    model.pe = model_level.to(device)
    for blk, encs in zip(model.blocks, per_layer):
        if not isinstance(blk.attn, Attention):
            blk.attn = Attention.from_timm(blk.attn)
        blk.attn.pe = encs.to(device)
        blk.__class__ = PEBlock

    if old_table is not None and 'ape_learned' in model.pe:
        _load_ape_table(model.pe['ape_learned'], old_table)
    if position_sampler is not None:
        model.position_sampler = build_position_sampler(position_sampler, grid=model.patch_embed.grid_size)
    return model


def _load_ape_table(ape: nn.Module, table: torch.Tensor) -> None:
    n = ape.pos_embed.shape[1]
    if table.shape[1] != n:
        side = int(round(table.shape[1] ** 0.5))
        table = resample_abs_pos_embed(table, new_size=list(ape.grid_size), old_size=[side, side], num_prefix_tokens=0)
    with torch.no_grad():
        ape.pos_embed.copy_(table)


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


def from_eva_rope(model_name: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformerPE:
    """Build timm's naver RoPE-ViT ``model_name`` (pretrained if asked) and return the vispe equivalent."""
    base, encs = eva_rope_base(model_name)
    eva = timm.create_model(model_name, pretrained=pretrained, **kwargs)
    vit_kwargs = {k: v for k, v in kwargs.items() if k not in ('rope_temperature', 'rope_type')}
    vit = timm.create_model(
        base, pretrained=False, init_values=1e-5, global_pool=eva.global_pool, no_embed_class=True, **vit_kwargs
    )
    vit = apply_encoding(vit, encs)
    vit.load_state_dict(convert_eva_rope_state_dict(eva.state_dict()), strict=True)
    return vit


#: what create_model itself takes besides timm's model arguments
_CREATE_MODEL_ARGUMENTS = {
    'encoding',
    'pretrained',
    'checkpoint_path',
    'features_only',
    'position_sampler',
    'out_indices',
    'feature_cls',
    'output_fmt',
}


def _misspelled_argument(error: TypeError, model_name: str, kwargs: dict[str, Any]) -> TypeError | None:
    """timm's "VisionTransformer.__init__() got an unexpected keyword argument 'img_sz'", for a key the caller
    passed, as an error naming the closest arguments that class takes; None for any other TypeError."""
    match = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(error))
    if match is None or match.group(2) not in kwargs:
        return None
    owner, key = match.groups()
    cls = getattr(timm.models, owner, None)
    accepted = (accepted_arguments(cls) if inspect.isclass(cls) else None) or set()
    valid = sorted(accepted | _CREATE_MODEL_ARGUMENTS)
    return TypeError(f'{model_name} ({owner}) got unknown argument {key!r}{closest(key, valid)}')


def create_model(
    model_name: str,
    encoding: EncodingSpec = 'default',
    pretrained: bool = False,
    checkpoint_path: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build any timm ViT name with ``encoding``; extra keyword arguments go to ``timm.create_model``.

    ``encoding='default'`` keeps what the name implies: the learned table of a plain ViT, the rotary encoding
    of timm's ``*_rope_*`` models, the encoding in a vispe-registered name. ``features_only=True`` (with
    ``out_indices``, ``feature_cls`` 'getter', 'hook' or 'fx') returns timm's feature wrapper, as timm does for its
    ViTs. ``position_sampler=dict(type='rpe2d', max_grid=(16, 16))`` attaches a training-time position sampler.
    ``'local-dir:PATH'`` rebuilds a model ``timm.models.save_for_hf`` saved (vispe names and converted timm names).

    ``checkpoint_path``: weights to load after building, strictly (a different ``num_classes`` only leaves the head
    fresh, with a warning): a vispe or timm state dict, a safetensors file, or a ``tools/train.py`` checkpoint (its
    ``backbone.`` prefix is handled): ``vispe.create_model(**cfg.model.backbone, checkpoint_path='epoch_30.pth')``
    with the backbone arguments of the training config. A checkpoint that does not fit is an error naming the keys
    that differ and, for a training checkpoint, the backbone arguments its config had.

    Every converted model carries a pretrained config of its own (``model.pretrained_cfg``): its vispe name as the
    architecture (``vit_tiny_patch16_224`` with ``encoding='irpe'`` is ``vit_tiny_patch16_irpe_224``; other timm
    names keep theirs), its input size and classes, no hub id or url (those name timm's weights, which the
    converted model no longer is), and the preprocessing of the weights it holds: timm's with ``pretrained=True``,
    vispe's otherwise.
    """
    from vispe.backbones import vispe_vit

    native = model_name.split('.')[0] in vispe_vit.default_cfgs
    if model_name.startswith('local-dir:'):
        from timm.models._hub import load_model_config_from_path

        saved = load_model_config_from_path(model_name[len('local-dir:') :])  # (cfg, architecture, model_args)
        native = saved[1] in vispe_vit.default_cfgs
        if not native:
            if encoding != 'default':
                kwargs['encoding'] = encoding
            return _from_local_dir(*saved, pretrained=pretrained, checkpoint_path=checkpoint_path, **kwargs)
    features_only, feature_kwargs = vispe_vit.split_feature_args(model_name, kwargs)
    sampler = kwargs.pop('position_sampler', None)
    _check_vit_kwargs(kwargs, defaults=False)
    if native and encoding != 'default':
        kwargs['encoding'] = encoding
    eva = eva_rope_base(model_name)
    try:
        if eva is not None:
            model = from_eva_rope(model_name, pretrained=pretrained, **kwargs)
        else:
            model = timm.create_model(model_name, pretrained=pretrained, **kwargs)
    except TypeError as error:  # a misspelled argument: Python's message names it, but not what was meant
        hint = _misspelled_argument(error, model_name, kwargs)
        if hint is None:
            raise
        raise hint from None
    except AssertionError as error:  # timm asserts dim % num_heads == 0, naming neither
        if 'divisible by num_heads' not in str(error):
            raise
        given = {k: kwargs[k] for k in ('embed_dim', 'num_heads') if k in kwargs}
        raise ValueError(
            f'{model_name} with {given}: embed_dim is not divisible by num_heads (each head gets embed_dim / '
            'num_heads channels); pick num_heads dividing embed_dim'
        ) from error
    if not native:
        source_cfg = dict(getattr(model, 'pretrained_cfg', {}) or {})
        if encoding == 'default' and not isinstance(model, VisionTransformerPE):  # a plain timm ViT
            encoding = 'ape_learned' if getattr(model, 'pos_embed', None) is not None else None
        if encoding != 'default':  # None too: a vispe model without an encoding
            model = apply_encoding(model, encoding)
        if isinstance(model, VisionTransformerPE):
            base = eva[0] if eva else model_name.split('.')[0]
            spec = eva[1] if eva and encoding == 'default' else encoding
            vispe_vit.adopt_converted(model, base, spec, source_cfg, pretrained, kwargs)
    if sampler is not None:
        if not isinstance(model, VisionTransformerPE):
            raise TypeError(f'position_sampler needs a vispe model, but {model_name} with encoding=None is plain timm')
        model.position_sampler = build_position_sampler(sampler, grid=model.patch_embed.grid_size)
    if checkpoint_path is not None:
        vispe_vit.load_checkpoint_into(model, checkpoint_path)
    if features_only:
        return vispe_vit.wrap_features(model, model_name, **feature_kwargs)
    return model


def _from_local_dir(
    cfg: dict[str, Any],
    architecture: str,
    model_args: dict[str, Any],
    pretrained: bool,
    checkpoint_path: str | None,
    **kwargs: Any,
) -> nn.Module:
    """``create_model('local-dir:PATH')`` of a converted timm name (``encoding`` among its saved model arguments
    ``model_args``, its ``architecture`` the timm name; ``cfg`` the folder's pretrained config), which timm cannot
    rebuild: the model from its arguments, then with ``pretrained=True`` the folder's weights, strictly, as timm
    does for its own names."""
    from vispe.backbones import vispe_vit

    features_only, feature_kwargs = vispe_vit.split_feature_args(architecture, kwargs)
    model = create_model(architecture, **{**model_args, **kwargs})
    if pretrained:
        vispe_vit.load_checkpoint_into(model, vispe_vit.weights_file(cfg))
        kept = {k: v for k, v in cfg.items() if k not in ('architecture', 'file', 'source', 'tag')}
        model.pretrained_cfg = model.default_cfg = vispe_vit.describe_model_cfg(model, {**model.pretrained_cfg, **kept})
    if checkpoint_path is not None:
        vispe_vit.load_checkpoint_into(model, checkpoint_path)
    if features_only:
        return vispe_vit.wrap_features(model, architecture, **feature_kwargs)
    return model
