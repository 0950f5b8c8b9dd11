"""timm's VisionTransformer with positions and encoding hooks; ``apply_encoding`` converts a timm ViT, weights kept."""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from timm.layers import Attention as TimmAttention
from timm.layers import Format
from timm.models import VisionTransformer
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import Block
from torch import nn

from vispe.attention import Attention, set_attention_kernel
from vispe.backbones.base import PEBackbone, PEBlock, build_backbone_encodings
from vispe.backbones.common import (
    check_channels,
    check_image_dims,
    check_img_size,
    check_input_dtype,
    check_patch_multiple,
    check_vit_kwargs,
    use_patch_conv,
)
from vispe.backbones.mixed_sizes import check_images, mixed_features, pool_list, same_size
from vispe.encodings.base import Encoding
from vispe.encodings.build import EncodingSpec, normalize_spec
from vispe.flex import check_kernel
from vispe.layout import MODES
from vispe.positions import Positions, PositionSampler, build_position_sampler, grid_positions, is_symbolic
from vispe.registry import MODELS


@MODELS.register_module()
class VisionTransformerPE(PEBackbone, VisionTransformer):
    """A timm ``VisionTransformer`` driven by vispe encodings, taking any H x W divisible by the patch size.

    A position sampler acts in training only. Every forward also takes a list of (C, H_i, W_i) images (then one token
    tensor per image). ``torch.fx`` and ``torch.export`` (dynamic H, W) give one graph for every size.

    TorchScript: ``torch.jit.script(model)`` scripts the model's FX graph, ``forward`` only, in the mode it was scripted
    in, without a training-time sampler or a non-default resolution strategy.

    Args:
        encoding: a registered name, a config dict or a list of them (None: none).
        position_sampler: training-time positions, a config dict or a callable; None: the grid's own.
        mixed_sizes: how images of different sizes share the batch: 'pad' (one per row) or 'pack' (several per row).
        pack_tokens: patch tokens a packed row holds, >= 1; None: the longest image's.
        attention_kernel: 'auto', 'sdpa' or 'flex': where logit-bias terms are added (``vispe.flex``).
        **kwargs: timm's ``VisionTransformer`` arguments, checked first.
    """

    #: training-time position sampler ``(pos, batch_size) -> Positions``, or None
    position_sampler: PositionSampler | None = None
    #: how a list of images of several sizes shares the batch: 'pad' or 'pack' (``vispe.layout``)
    mixed_sizes: str = 'pad'
    #: with 'pack', the patch tokens of one row (None: the longest image's)
    pack_tokens: int | None = None
    #: timm's ViT stem (its ``group_matcher``); EncodingHost adds the model-level encodings ``pe``
    stem_prefixes = ('cls_token', 'reg_token', 'pos_embed', 'patch_embed', 'norm_pre')
    #: timm's record of the pretrained config (set by timm's builder, or by vispe for a converted model)
    pretrained_cfg: dict[str, Any]
    default_cfg: dict[str, Any]
    #: timm's record of the model arguments that rebuild it (``timm.models.save_for_hf``)
    _model_args: dict[str, Any]
    #: timm's record of the model's traits (``fixed_input_size``)
    _traits: dict[str, Any]

    def __init__(
        self,
        encoding: EncodingSpec = 'ape_learned',
        position_sampler: None | dict[str, Any] | PositionSampler = None,
        mixed_sizes: str = 'pad',
        pack_tokens: int | None = None,
        attention_kernel: str = 'auto',
        **kwargs: Any,
    ) -> None:
        check_vit_kwargs(kwargs, defaults=True)
        check_kernel(attention_kernel)
        super().__init__(**kwargs)
        apply_encoding(self, encoding, position_sampler=position_sampler)
        self.set_mixed_sizes(mixed_sizes, pack_tokens)
        set_attention_kernel(self, attention_kernel)

    def set_mixed_sizes(self, mode: str = 'pad', pack_tokens: int | None = None) -> None:
        """How lists of images of several sizes share a batch; ValueError for a bad value."""
        if mode not in MODES:
            raise ValueError(f'mixed_sizes must be one of {list(MODES)}, got {mode!r}')
        if pack_tokens is not None and (
            isinstance(pack_tokens, bool) or not isinstance(pack_tokens, int) or pack_tokens < 1
        ):
            raise ValueError(
                'pack_tokens is a positive int (patch tokens of the largest image a packed row holds) or None, got '
                f'{pack_tokens!r}'
            )
        self.mixed_sizes, self.pack_tokens = mode, pack_tokens

    def __prepare_scriptable__(self) -> nn.Module:
        """What ``torch.jit.script(model)`` compiles: the model's FX graph; TypeError when it cannot trace."""
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
        """ValueError unless an input of ``height`` x ``width`` divides into whole patches (or the model pads)."""
        if not self.patch_embed.dynamic_img_pad:
            alternative = ', or build the model with dynamic_img_pad=True to pad the borders'
            patch = cast(tuple[int, int], tuple(self.patch_embed.patch_size))
            check_patch_multiple('VisionTransformerPE', (height, width), patch, alternative)

    def input_channels(self) -> int | None:
        """The input's channels: the patch embedding conv's (None for another embedding)."""
        proj = getattr(self.patch_embed, 'proj', None)
        return proj.in_channels if isinstance(proj, nn.Conv2d) else None

    def check_input(self, x: torch.Tensor) -> None:
        """The eager forward's input checks (shape, channels, dtype, whole patches); skipped for symbolic sizes."""
        check_image_dims('VisionTransformerPE', x.shape)
        in_chans = self.input_channels()
        if in_chans is not None:  # (check_channels leaves a traced shape alone)
            check_channels('VisionTransformerPE', 'the input', x.shape, in_chans)
        if not is_symbolic(x):
            check_input_dtype('VisionTransformerPE', x, self.patch_embed.proj.weight)
        if not is_symbolic(x.shape[-2], x.shape[-1]):
            self._check_size(x.shape[-2], x.shape[-1])

    def tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, Positions]:
        """Images (B, C, H, W) -> tokens (B, prefix + h*w, D) with embed hooks applied, and their positions."""
        self.check_input(x)
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

    def forward_features(  # a list of images gives a list of token tensors
        self, x: torch.Tensor | list[torch.Tensor], attn_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> Any:
        if isinstance(x, (list, tuple)):
            images = check_images('VisionTransformerPE', x, self.input_channels())
            if attn_mask is not None or is_causal:
                raise ValueError(
                    'VisionTransformerPE: a list of images attends within each image (its own mask); attn_mask and '
                    'is_causal are for a (B, C, H, W) batch'
                )
            if same_size(images):  # one size: the batch path, the tokens split per image
                return list(self.forward_features(torch.stack(images)).unbind(0))
            return mixed_features(self, images)
        x, pos = self.tokens(x)
        return self.norm(self.run_blocks(x, pos, attn_mask, is_causal))

    def forward_head(self, x: torch.Tensor | list[torch.Tensor], pre_logits: bool = False) -> torch.Tensor:
        """timm's head; a list of per-image token tensors (``forward_features`` of a list) is pooled per image."""
        pooled = pool_list(self, list(x)) if isinstance(x, (list, tuple)) else self.pool(x)
        pooled = self.head_drop(self.fc_norm(pooled))
        return pooled if pre_logits else self.head(pooled)

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
        if isinstance(x, (list, tuple)):
            raise ValueError(
                'forward_intermediates takes a (B, C, H, W) batch; for images of several sizes call it once per size '
                '(forward_features takes a list)'
            )
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
                    assert pos.grid is not None  # tokens() made the positions of the (h, w) patch grid
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


def _prefix_tokens_absorb_pos(model: VisionTransformer, table: torch.Tensor) -> None:
    """Fold the prefix tokens' entries of the absolute ``table`` into the tokens themselves."""
    if model.no_embed_class:
        return
    offset = 0
    with torch.no_grad():
        for token in (model.cls_token, model.reg_token):
            if token is not None:
                n = token.shape[1]
                token.add_(table[:, offset : offset + n])
                offset += n


def _table_encoding(encodings: nn.ModuleDict | None) -> Encoding | None:
    """The encoding among ``encodings`` that holds a learned patch table (``Encoding.learned_pos_embed``), if any."""
    return next((e for e in (encodings or {}).values() if isinstance(e, Encoding) and e.learned_pos_embed), None)


def _strip_encodings(model: VisionTransformer) -> torch.Tensor | None:
    """Remove the model's absolute table and vispe encodings; return the old patch table (1, h*w, D), if any."""
    table = None
    if isinstance(model, VisionTransformerPE):  # during VisionTransformerPE.__init__ there is no pe yet
        holder = _table_encoding(getattr(model, 'pe', None))
        table = holder.pos_embed_table() if holder is not None else None
    elif model.pos_embed is not None:
        _prefix_tokens_absorb_pos(model, model.pos_embed)
        npt = 0 if model.no_embed_class else model.num_prefix_tokens
        table = model.pos_embed.data[:, npt:]
    model.pos_embed = None
    return table


def _check_convertible(model: nn.Module) -> VisionTransformer:
    """``model`` if ``apply_encoding`` can convert it, else a TypeError or ValueError saying why."""
    if not isinstance(model, VisionTransformer) or type(model) not in (VisionTransformer, VisionTransformerPE):
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
    return model


def apply_encoding(
    model: nn.Module,
    encoding: EncodingSpec,
    copy_model: bool = False,
    position_sampler: None | dict[str, Any] | PositionSampler = None,
) -> VisionTransformerPE:
    """Convert a timm ViT to use ``encoding`` (a name, a config dict or a list of them), keeping its weights.

    A learned absolute table goes, resampled, to the requested encoding that holds one (``ape_learned``), else it is
    dropped; the prefix tokens' entries are folded into those tokens. ``copy_model=True`` converts a deep copy.
    ``position_sampler`` is attached for training; None keeps the current one.
    """
    cfgs = normalize_spec(encoding)
    model = _check_convertible(model)
    if copy_model:
        model = copy.deepcopy(model)
    old_table = _strip_encodings(model)

    patch_embed = model.patch_embed
    if getattr(patch_embed, 'img_size', None) is not None and not getattr(patch_embed, 'dynamic_img_pad', False):
        check_img_size(
            'VisionTransformerPE', patch_embed.img_size, patch_embed.patch_size, ', or build with dynamic_img_pad=True'
        )
    blocks = [cast(Block, blk) for blk in model.blocks]
    first = blocks[0].attn if blocks else None
    num_heads = first.num_heads if isinstance(first, (TimmAttention, Attention)) else 1  # else from_timm refuses it
    grid = tuple(patch_embed.grid_size)
    model_level, per_layer = build_backbone_encodings(
        cfgs, model.embed_dim, num_heads, len(blocks), grid, backbone='VisionTransformerPE'
    )

    model.__class__ = VisionTransformerPE
    vit = cast(VisionTransformerPE, model)
    vit.dynamic_img_size = True  # type: ignore[misc]  # timm's Final: a converted model takes any size
    vit._traits = {**getattr(vit, '_traits', {}), 'fixed_input_size': False}  # timm's record of the input size
    patch_embed.flatten = False
    patch_embed.output_fmt = Format.NHWC
    patch_embed.strict_img_size = False
    use_patch_conv(patch_embed)
    device = patch_embed.proj.weight.device
    vit.pe = model_level.to(device)
    for blk, encs in zip(blocks, per_layer):
        attn = blk.attn if isinstance(blk.attn, Attention) else Attention.from_timm(blk.attn)
        attn.pe = encs.to(device)
        blk.attn = attn
        blk.__class__ = PEBlock

    holder = _table_encoding(vit.pe)
    if old_table is not None and holder is not None:
        holder.adopt_pos_embed(old_table)
    if position_sampler is not None:
        vit.position_sampler = build_position_sampler(position_sampler, grid=patch_embed.grid_size)
    return vit


__all__ = ['VisionTransformerPE', 'apply_encoding']
