"""What every vispe backbone shares: building its encodings from a spec, split into model-level and per-layer; the
checks of its arguments and inputs (each in one place); its pre-norm blocks on vispe's attention."""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from timm.models.vision_transformer import Block
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from vispe.attention import Attention
from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.build import (
    EncodingSpec,
    build_encoding,
    encoding_class,
    list_encodings,
    normalize_spec,
)
from vispe.encodings.stack import EncodingStack
from vispe.positions import Positions, is_symbolic


def backbone_encodings(ndim: int = 2, cameras: bool = False, hooks: frozenset[str] | None = None) -> list[str]:
    """Names of the encodings a backbone accepts: those for ``ndim``-D positions, camera ones only with ``cameras``,
    and with ``hooks``, only those whose hooks are all among them."""
    names = list_encodings(ndim, cameras)
    return names if hooks is None else [n for n in names if encoding_class(n).hooks() <= hooks]


def check_backbone_encoding(name: str, backbone: str, ndim: int, cameras: bool, hooks: frozenset[str] | None):
    """ValueError naming the encoding, the backbone and what it accepts when ``backbone`` cannot serve ``name``."""
    cls = encoding_class(name)
    accepted = backbone_encodings(ndim, cameras, hooks)
    if ndim not in cls.ndims:
        kind = {2: 'image token grids', 3: 'point clouds'}.get(ndim, f'{ndim}D positions')
        raise ValueError(
            f'{backbone}: encoding {name!r} does not work on {ndim}D positions; for {kind} choose one of {accepted} '
            f'({name} is for {" or ".join(f"{d}D" for d in cls.ndims)} positions)'
        )
    if cls.needs_cameras and not cameras:
        raise ValueError(
            f'{backbone}: encoding {name!r} needs cameras, which {backbone} does not have; choose one of {accepted}, '
            f"or use {name} in the multi-view transformer (dict(type='MultiViewTransformer', ...))"
        )
    if hooks is not None and not cls.hooks() <= hooks:
        raise ValueError(
            f'{backbone}: {name} needs the tokens to form one image grid (its {sorted(cls.hooks() - hooks)} hooks), '
            f'which {backbone} does not have; choose one of {accepted}'
        )


def check_rates(owner: str, **rates: float) -> None:
    """ValueError naming ``owner`` and the argument unless each rate is a probability in [0, 1]."""
    for name, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f'{owner}: {name} is a probability in [0, 1], got {name}={rate!r}')


def check_size(owner: str, name: str, value: Any, pair: bool = True) -> tuple[int, int]:
    """(H, W) from ``value``, an int or (with ``pair``) an (H, W) pair of positive ints; anything else (a string from
    --cfg-options, a float, a bool, None, a triple) raises a ValueError naming ``owner``, the argument and the value,
    before timm or a layer meets it."""
    given = tuple(value) if pair and isinstance(value, (tuple, list)) else (value, value)
    if len(given) == 2 and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1 for v in given
    ):
        return int(given[0]), int(given[1])
    expected = 'an int or (H, W) of positive ints' if pair else 'a positive int'
    raise ValueError(f'{owner}: {name} must be {expected}, got {name}={value!r}')


def check_img_size(
    owner: str,
    img_size: int | Sequence[int],
    patch_size: int | Sequence[int],
    alternative: str = '',
    patch_pair: bool = True,
) -> None:
    """At build: ValueError naming ``owner`` unless ``img_size`` (int or (H, W)) and ``patch_size`` (an int, or with
    ``patch_pair`` an (H, W) pair) are sizes (``check_size``) and the image divides into whole patches
    (``check_patch_multiple``); ``alternative`` is added to the suggested fix."""
    size, patch = check_size(owner, 'img_size', img_size), check_size(owner, 'patch_size', patch_size, patch_pair)
    check_patch_multiple(owner, size, patch, alternative, argument=True)


def check_patch_multiple(
    owner: str, size: tuple[int, int], patch: tuple[int, int], alternative: str = '', argument: bool = False
) -> None:
    """The one check that an image of ``size`` (H, W) divides into whole patches of ``patch`` (ph, pw): a
    ValueError naming ``owner``, both sizes and the nearest multiple of the patch otherwise, ``alternative`` added to
    the fix. ``argument``: the size is the ``img_size`` argument at build (the border would never be seen), else an
    input's (to resize or crop)."""
    (h, w), (ph, pw) = size, patch
    if not (h % ph or w % pw):
        return
    near = f'{max(ph, round(h / ph) * ph)}x{max(pw, round(w / pw) * pw)}'
    if argument:
        problem = f'img_size {h}x{w} is not divisible by patch_size {ph}x{pw}: the border would never be seen'
        fix = f'use a multiple of the patch, e.g. img_size {near}'
    else:
        problem = f'image size {h}x{w} is not divisible by the patch size {ph}x{pw}'
        fix = f'resize or crop it to a multiple of the patch, e.g. {near}'
    raise ValueError(f'{owner}: {problem}; {fix}{alternative}')


def rotary_encodings(names: Sequence[str]) -> list[str]:
    """Those of ``names`` that rotate q and k: the classes overriding the ``rotate`` hook."""
    return [n for n in names if 'rotate' in encoding_class(n).hooks()]


def check_one_rotation(names: Sequence[str], backbone: str) -> None:
    """ValueError naming the encodings when more than one of ``names`` rotates q and k: each rotates the same
    channels, so the second would turn the first's relative positions into something neither encoding defines."""
    rotary = rotary_encodings(names)
    if len(rotary) > 1:
        raise ValueError(
            f'{backbone}: {rotary[0]} cannot be combined with {rotary[1:]}: each rotates q and k (a rotate hook), so '
            f'together they rotate the same channels twice and the logits stop depending on relative positions as '
            f'either defines; pick one of {rotary} (other encodings, e.g. ape_learned or peg, combine with it)'
        )


def check_channels(owner: str, what: str, shape: Sequence[int], in_chans: int, one: bool = False) -> None:
    """ValueError naming ``what`` (the input, image 2 of a list), its ``shape`` and the fix when its channel dimension
    (dim 0 of one (C, H, W) image when ``one``, else dim 1 of a (B, C, H, W) batch) is not the model's ``in_chans``,
    where the patch embedding's conv would fail with a bare shape error. A traced shape (FX, export) is not
    checked: its sizes are symbolic."""
    if is_symbolic(shape):
        return
    c = shape[0] if one else shape[1]
    if is_symbolic(c) or c == in_chans:
        return
    if shape[-1] == in_chans:
        fix = 'it looks channels-last (H, W, C): permute it to channels-first (' + (
            'x.permute(2, 0, 1))' if one else 'x.permute(0, 3, 1, 2))'
        )
    elif c == 1 and in_chans == 3:
        fix = (
            'repeat the gray channel ('
            + ('x.expand(3, -1, -1)' if one else 'x.expand(-1, 3, -1, -1)')
            + (") or load it as RGB (PIL: img.convert('RGB'))")
        )
    elif c == 4 and in_chans == 3:
        fix = 'drop the alpha channel (' + ('x[:3]' if one else 'x[:, :3]') + ") or load it as RGB (img.convert('RGB'))"
    else:
        fix = f'give it {in_chans} channels, or build the model with in_chans={c}'
    raise ValueError(f'{owner}: {what} has shape {tuple(shape)}: {c} channel(s), but the model takes {in_chans}; {fix}')


def check_image_dims(owner: str, shape: Sequence[int]) -> None:
    """ValueError naming the shape and the fix unless an input is a (B, C, H, W) batch (an FX-traced shape, a Proxy,
    is not checked)."""
    if is_symbolic(shape) or len(shape) == 4:
        return
    hints = {
        1: 'a 1-D tensor is not an image (a flattened one reshapes to (1, C, H, W))',
        2: 'one single-channel image (H, W) is x[None, None]',
        3: 'one image (C, H, W) is x[None]; images of several sizes go as a list of (C, H, W) tensors',
        5: 'views (B, V, C, H, W) go into the batch (x.flatten(0, 1)), or to MultiViewTransformer with cameras',
    }
    hint = hints.get(len(shape), 'give a (B, C, H, W) batch')
    raise ValueError(f'{owner}: the input has shape {tuple(shape)}, not a batch of images (B, C, H, W); {hint}')


def check_input_dtype(owner: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """ValueError naming ``owner``, the input's dtype, the model's and the fix when ``x`` does not match the
    ``weight`` of the backbone's first layer, where the conv or linear would fail with a bare dtype error. Under
    autocast, float32 and lower-precision inputs are autocast's to cast (float64 is not: it is refused too)."""
    if x.dtype == weight.dtype:
        return
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16) and torch.is_autocast_enabled(x.device.type):
        return
    if not x.is_floating_point():
        raise ValueError(
            f'{owner}: the input is {x.dtype} but the model is {weight.dtype}: convert it to floating point as in '
            f'training (e.g. x.float() / 255 for 8-bit images, then normalise), then cast as for any other dtype'
        )
    raise ValueError(
        f'{owner}: the input is {x.dtype} but the model is {weight.dtype}: cast the input (x.float(), or '
        f'x.to({weight.dtype})), cast the model (model.to({x.dtype})), or run mixed precision under autocast '
        f"(--amp in vispe's tools, torch.autocast in code)"
    )


class PatchConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same arguments, parameters and state-dict keys) for patch embeddings, working around a oneDNN
    fault of torch 2.14 on CPU: a strided bfloat16 convolution (a bf16 model, or CPU bf16 autocast) whose output is
    one column wide and several rows high returns values off by O(1), sometimes NaN (a 40 x 1 grid of 2 px
    patches: max error 3.0 against float32; 0.01 with oneDNN switched off). Such inputs get one stride of zero
    columns on the right, which leaves the first output column as it is, and the extra column is dropped. Other
    inputs, devices and dtypes take the plain path, and so do TorchScript, FX tracing and torch.export (the check
    reads the input's shape, which they cannot branch on at every size; what they record is plain ``nn.Conv2d``, so
    a traced, scripted or exported bf16 CPU model keeps the fault on one-column grids)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if self._hits_onednn_fault(x):
                padded = nn.functional.pad(x, (0, self.stride[1]))
                return self._conv_forward(padded, self.weight, self.bias)[..., :1]
        return self._conv_forward(x, self.weight, self.bias)

    @torch.jit.unused
    def _hits_onednn_fault(self, x: torch.Tensor) -> bool:
        if is_fx_symbolic_tracing() or torch.compiler.is_exporting():  # FX and export: shapes are symbolic
            return False
        if x.device.type != 'cpu' or x.dim() != 4 or self.padding_mode != 'zeros' or isinstance(self.padding, str):
            return False
        if not (
            x.dtype == torch.bfloat16
            or (torch.is_autocast_enabled('cpu') and torch.get_autocast_dtype('cpu') == torch.bfloat16)
        ):
            return False
        span = x.shape[-1] + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1
        return self.stride[1] > 1 and span // self.stride[1] + 1 == 1


def use_patch_conv(patch_embed: nn.Module) -> None:
    """Give a timm ``PatchEmbed``'s projection the ``PatchConv2d`` workaround, in place (the weights stay)."""
    if type(patch_embed.proj) is nn.Conv2d:
        patch_embed.proj.__class__ = PatchConv2d


def build_backbone_encodings(
    spec: EncodingSpec,
    dim: int,
    num_heads: int,
    depth: int,
    grid_size: Sequence[int],
    ndim: int = 2,
    cameras: bool = False,
    backbone: str = 'this backbone',
    hooks: frozenset[str] | None = None,
    **extra_context: Any,
) -> tuple[nn.ModuleDict, list[nn.ModuleDict]]:
    """Build ``spec`` (a name, a config dict or a list of them) for a ``depth``-block backbone.

    Returns (model_level, per_layer): one ModuleDict of the encodings with embed / after_block hooks, shared by
    the model, and ``depth`` ModuleDicts (one per attention layer, built with ``layer_index=i``) of those with
    attention hooks. Before building anything, a width not divisible by ``num_heads`` raises ValueError, and so
    does an encoding ``backbone`` (its name, for the messages) cannot serve: one not meant for ``ndim``-D
    positions, a camera encoding when the backbone supplies no cameras (``cameras=False``), one using hooks
    outside ``hooks`` (None: any), the message listing those it accepts; and so do two encodings that both rotate
    q and k.
    Each encoding receives the backbone context it names: dim, num_heads, ndim, grid_size (the
    training token grid), depth and ``extra_context`` (the multi-view transformer's patch_size). Keys are the
    registry names.
    """
    check_heads(dim, num_heads, backbone)
    cfgs = normalize_spec(spec)
    for cfg in cfgs:
        check_backbone_encoding(cfg['type'], backbone, ndim, cameras, hooks)
    check_one_rotation([c['type'] for c in cfgs], backbone)
    context = dict(dim=dim, num_heads=num_heads, ndim=ndim, grid_size=tuple(grid_size), depth=depth, **extra_context)
    layer_cfgs = [c for c in cfgs if encoding_class(c['type']).per_layer()]
    model_level = nn.ModuleDict(
        {c['type']: build_encoding(c, **context) for c in cfgs if not encoding_class(c['type']).per_layer()}
    )
    per_layer = [
        nn.ModuleDict({c['type']: build_encoding(c, layer_index=i, **context) for c in layer_cfgs})
        for i in range(depth)
    ]
    return model_level, per_layer


class PEBlock(Block):
    """timm's pre-norm Block whose attention receives the positions."""

    attn: Attention

    # the positions come second, before timm's attn_mask: every backbone passes them, and blocks are called
    # positionally (gradient checkpointing)
    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        pos: Positions | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
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


if TYPE_CHECKING:  # the host is always mixed into an nn.Module, whose methods it uses
    _HostBase = nn.Module
else:
    _HostBase = object


class EncodingHost(_HostBase):
    """What a vispe backbone says about its encodings; mixed into backbones that keep model-level encodings in
    ``self.pe`` and per-layer ones in ``self.blocks[i].attn.pe``.

    It also says how the optimizer should treat each parameter, from one declaration so that timm's
    ``create_optimizer_v2`` and vispe's mmengine constructor (``vispe.engine.optim``) cannot disagree:
    ``no_weight_decay()`` collects the backbone's tokens and tables (``own_no_weight_decay``) and every encoding's
    declared ``no_weight_decay_params``; ``group_matcher()`` (timm's contract) and ``layer_id()`` (BEiT's numbering)
    put the stem (``stem_prefixes``, plus the model-level encodings ``pe``) in layer 0 and each block, with its
    per-layer encodings, in its own layer.
    """

    #: parameter-name prefixes of the stem besides ``pe``: the embeddings before the first block
    stem_prefixes: ClassVar[tuple[str, ...]] = ()
    #: the backbone's own parameters that take no weight decay, where it has them: prefix tokens and absolute
    #: tables (timm's and DeiT's convention)
    own_no_weight_decay: ClassVar[tuple[str, ...]] = ('cls_token', 'reg_token', 'dist_token', 'mask_token', 'pos_embed')
    #: the model-level encodings, by registry name
    pe: nn.ModuleDict

    def attentions(self) -> list[Attention]:
        """Each block's vispe attention (``blocks[i].attn``), in block order."""
        # ``blocks`` is the host's own (a timm ViT's nn.Sequential, a ModuleList elsewhere), so it is not declared here
        blocks = cast(Iterable[nn.Module], self.blocks)
        return [cast(Attention, block.attn) for block in blocks]

    def layer_encodings(self) -> list[nn.ModuleDict]:
        """Each block's per-layer encodings (``blocks[i].attn.pe``), in block order."""
        return [attn.pe for attn in self.attentions()]

    @property
    def encoding_names(self) -> list[str]:
        """Registry names of the encodings, model-level first."""
        names = list(self.pe)
        layers = self.layer_encodings()
        return names + [n for n in layers[0] if n not in names] if layers else names

    @property
    def encoding_stack(self) -> EncodingStack:
        """The model-level encodings (``self.pe``) as an ``EncodingStack``: the backbone's ``embed`` and
        ``after_block`` phases go through it (each attention has its own, over its per-layer ``pe``)."""
        return EncodingStack(self.pe)

    def encodings(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every encoding instance, model-level and per-layer."""
        yield from self.pe.items()
        for encodings in self.layer_encodings():
            yield from encodings.items()

    # --- optimizer groups -------------------------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Full names of the parameters that take no weight decay besides the 1-D ones and biases (which the
        optimizers exclude by rule): the tokens and tables of ``own_no_weight_decay`` the model has, and each
        encoding's declared parameters. timm's ``create_optimizer_v2`` reads it as it is."""
        names = {name for name, _ in self.named_parameters()}
        skip = {name for name in self.own_no_weight_decay if name in names}
        for prefix, module in self.named_modules():
            if isinstance(module, Encoding):
                skip |= {f'{prefix}.{name}' for name in module.no_weight_decay()}
        return skip

    def _stem_pattern(self) -> str:
        prefixes = '|'.join(re.escape(p) for p in (*self.stem_prefixes, 'pe'))
        return rf'^(?:{prefixes})(?:\.|$)'

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's layer grouping (``param_groups_layer_decay``, ``group_parameters``): the stem, model-level
        encodings (``pe.*``) included, first; then each block with its per-layer encodings (``blocks.i.attn.pe.*``),
        a final ``norm`` joining the last block (timm's convention); anything else (the head) last. Without this
        the encodings' names match nothing and timm gives them the head's learning-rate scale."""
        return dict(stem=self._stem_pattern(), blocks=[(r'^blocks\.(\d+)', None), (r'^norm', (99999,))])

    @property
    def num_layers(self) -> int:
        """Layers of layer-wise lr decay between the stem and the head: the blocks."""
        return len(self.attentions())

    def layer_id(self, name: str) -> int:
        """BEiT's layer of parameter ``name`` (relative to the backbone): 0 for the stem and the model-level
        encodings, i + 1 for block i and its per-layer encodings, ``num_layers + 1`` for the rest (final norm,
        head). Its lr scale under layer decay ``rate`` is rate ** (num_layers + 1 - layer_id)."""
        block = re.match(r'blocks\.(\d+)(?:\.|$)', name)
        if block:
            return int(block.group(1)) + 1
        if re.match(self._stem_pattern(), name):
            return 0
        return self.num_layers + 1


__all__ = [
    'EncodingHost',
    'PEBlock',
    'backbone_encodings',
    'build_backbone_encodings',
    'check_backbone_encoding',
    'check_channels',
    'check_image_dims',
    'check_img_size',
    'check_input_dtype',
    'check_one_rotation',
    'check_patch_multiple',
    'check_rates',
    'check_size',
    'pe_blocks',
    'rotary_encodings',
]
