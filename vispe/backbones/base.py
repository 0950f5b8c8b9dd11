"""What every vispe backbone is built on: encodings built from a checked spec, pre-norm blocks on vispe's attention,
``EncodingHost`` and the forward protocol ``PEBackbone``. The hook contract is ``vispe.encodings.base.HOOK_TABLE``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, cast

import torch
from timm.models.vision_transformer import Block
from torch import nn
from torch.utils.checkpoint import checkpoint

from vispe.attention import Attention
from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.build import EncodingSpec, build_encoding, encoding_class, list_encodings, normalize_spec
from vispe.encodings.stack import EncodingStack
from vispe.positions import Positions


def backbone_encodings(
    ndim: int = 2, cameras: bool = False, hooks: frozenset[str] | None = None, grid: bool = True
) -> list[str]:
    """Names of the encodings a backbone for ``ndim``-D positions accepts, given ``cameras``, ``grid`` and ``hooks``."""
    names = list_encodings(ndim, cameras, grid)
    return names if hooks is None else [n for n in names if required_hooks(n) <= hooks]


def required_hooks(name: str) -> frozenset[str]:
    """The hooks encoding ``name`` needs whatever its options (its class's, less ``option_hooks``)."""
    cls = encoding_class(name)
    return cls.hooks() - cls.option_hooks


def position_kind(ndim: int, grid: bool) -> str:
    """What a backbone's positions are, in words."""
    kinds = {(2, True): 'image token grids', (3, False): 'point clouds', (3, True): 'video token grids'}
    return kinds.get((ndim, grid), f'{ndim}D positions')


def check_backbone_encoding(
    name: str, backbone: str, ndim: int, cameras: bool, hooks: frozenset[str] | None, grid: bool = True
) -> None:
    """ValueError naming the encoding, the backbone and what it accepts when ``backbone`` cannot serve ``name``."""
    cls = encoding_class(name)
    accepted = backbone_encodings(ndim, cameras, hooks, grid)
    kind = position_kind(ndim, grid)
    if ndim not in cls.ndims:
        raise ValueError(
            f'{backbone}: encoding {name!r} does not work on {ndim}D positions; for {kind} choose one of {accepted} '
            f'({name} is for {" or ".join(f"{d}D" for d in cls.ndims)} positions)'
        )
    if cls.needs_grid and not grid:
        raise ValueError(
            f"{backbone}: encoding {name!r} needs its positions on a token grid (an image's (h, w), a video's "
            f'(t, h, w)), which {kind} do not have; for {kind} choose one of {accepted}'
        )
    if cls.needs_cameras and not cameras:
        raise ValueError(
            f'{backbone}: encoding {name!r} needs cameras, which {backbone} does not have; choose one of {accepted}, '
            f"or use {name} in the multi-view transformer (dict(type='MultiViewTransformer', ...))"
        )
    if hooks is not None and not required_hooks(name) <= hooks:
        raise ValueError(
            f'{backbone}: {name} needs the tokens to form one image grid (its {sorted(required_hooks(name) - hooks)} '
            'hooks), '
            f'which {backbone} does not have; choose one of {accepted}'
        )


def rotary_encodings(names: Sequence[str]) -> list[str]:
    """Those of ``names`` that rotate q and k: the classes overriding the ``rotate`` hook."""
    return [n for n in names if 'rotate' in encoding_class(n).hooks()]


def check_one_rotation(names: Sequence[str], backbone: str) -> None:
    """ValueError when more than one of ``names`` rotates q and k (they would rotate the same channels twice)."""
    rotary = rotary_encodings(names)
    if len(rotary) > 1:
        raise ValueError(
            f'{backbone}: {rotary[0]} cannot be combined with {rotary[1:]}: each rotates q and k (a rotate hook), so '
            f'together they rotate the same channels twice and the logits stop depending on relative positions as '
            f'either defines; pick one of {rotary} (other encodings, e.g. ape_learned or peg, combine with it)'
        )


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
    grid: bool = True,
    **extra_context: Any,
) -> tuple[nn.ModuleDict, list[nn.ModuleDict]]:
    """Build ``spec`` (a name, a config dict or a list of them) for a ``depth``-block backbone: one ModuleDict of the
    model-level encodings (embed / after_block hooks) and ``depth`` of the per-layer ones (``layer_index=i``), keyed by
    registry name. Raises ValueError before building for a width not divisible by ``num_heads``, an encoding
    ``backbone`` cannot serve, or two rotary encodings. Each encoding gets the context it names: dim, num_heads,
    ndim, grid_size (the training grid), depth and ``extra_context``.
    """
    check_heads(dim, num_heads, backbone)
    cfgs = normalize_spec(spec)
    for cfg in cfgs:
        check_backbone_encoding(cfg['type'], backbone, ndim, cameras, hooks, grid)
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
    for name, enc in model_level.items():
        unsupported = cast(Encoding, enc).active_hooks() - hooks if hooks is not None else frozenset()
        if unsupported:  # an option switched on a hook this backbone does not call (lape=True: attn_input)
            raise ValueError(
                f'{backbone}: {name} as configured uses the {sorted(unsupported)} hooks, which {backbone} does not '
                f'call (its blocks take {sorted(hooks or ())}); drop the option that switches them on (lape=True '
                'for attn_input), or use another backbone'
            )
    return model_level, per_layer


class PEBlock(Block):
    """timm's pre-norm Block whose attention takes the positions; ``attn_input`` transforms its normalised input."""

    attn: Attention

    # the positions come second, before timm's attn_mask: every backbone passes them, and blocks are called
    # positionally (gradient checkpointing)
    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        pos: Positions | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        attn_input: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        h = self.norm1(x)
        if attn_input is not None:  # the encodings' attn_input hook (LaPE), on the normalised input alone
            h = attn_input(h)
        x = x + self.drop_path1(self.ls1(self.attn(h, pos, attn_mask=attn_mask, is_causal=is_causal)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def pe_blocks(
    embed_dim: int, num_heads: int, mlp_ratio: float, drop_path_rate: float, per_layer: list[nn.ModuleDict]
) -> nn.ModuleList:
    """Pre-norm blocks on vispe's attention, one per ``per_layer`` entry, drop path rising linearly to
    ``drop_path_rate``."""
    rates = torch.linspace(0, drop_path_rate, len(per_layer)).tolist()
    blocks = nn.ModuleList()
    for rate, encodings in zip(rates, per_layer):
        block = PEBlock(embed_dim, num_heads, mlp_ratio, qkv_bias=True, drop_path=rate)
        # timm's Block passes arguments vispe's Attention does not take to attn_layer, so swap it in after
        block.attn = Attention(embed_dim, num_heads, qkv_bias=True, encodings=encodings)
        blocks.append(block)
    return blocks


class EncodingHost(nn.Module):
    """What a backbone says about its encodings: model-level ones in ``self.pe``, per-layer ones in
    ``blocks[i].attn.pe``; it declares, once for timm's and vispe's optimizer builders, the parameters without weight
    decay and the layers of layer-wise decay (the stem and ``pe``, then each block with its per-layer encodings)."""

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
        """The model-level encodings as an ``EncodingStack``, which runs the ``embed`` and ``after_block`` phases."""
        return EncodingStack(self.pe)

    def encodings(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every encoding instance, model-level and per-layer."""
        yield from self.pe.items()
        for encodings in self.layer_encodings():
            yield from encodings.items()

    # --- optimizer groups -------------------------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Full names of the parameters without weight decay besides 1-D ones and biases: ``own_no_weight_decay`` and
        the encodings' declared ones."""
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
        """timm's layer grouping: the stem (with ``pe``), then each block with its encodings, ``norm`` with the last."""
        return dict(stem=self._stem_pattern(), blocks=[(r'^blocks\.(\d+)', None), (r'^norm', (99999,))])

    @property
    def num_layers(self) -> int:
        """Layers of layer-wise lr decay between the stem and the head: the blocks."""
        return len(self.attentions())

    def layer_id(self, name: str) -> int:
        """BEiT's layer of parameter ``name``: 0 stem and ``pe``, i + 1 block i, ``num_layers + 1`` the rest."""
        block = re.match(r'blocks\.(\d+)(?:\.|$)', name)
        if block:
            return int(block.group(1)) + 1
        if re.match(self._stem_pattern(), name):
            return 0
        return self.num_layers + 1


class PEBackbone(EncodingHost):
    """The forward protocol: ``tokens`` (inputs -> embedded tokens (B, N, D) and ``Positions``), then ``run_blocks``.
    A subclass builds its encodings (``build_encodings``), supplies ``tokens``, has ``blocks[i](x, pos, *args)``."""

    #: recompute each block's activations in the backward pass (timm's ``set_grad_checkpointing`` sets it)
    grad_checkpointing: bool = False

    def build_encodings(
        self,
        spec: EncodingSpec,
        embed_dim: int,
        num_heads: int,
        depth: int,
        grid_size: Sequence[int],
        **options: Any,
    ) -> list[nn.ModuleDict]:
        """``build_backbone_encodings`` of ``spec``; keeps the model-level encodings in ``self.pe``, returns the
        per-layer ones."""
        self.pe, per_layer = build_backbone_encodings(
            spec, embed_dim, num_heads, depth, grid_size, backbone=type(self).__name__, **options
        )
        return per_layer

    def tokens(self, *inputs: Any) -> tuple[torch.Tensor, Positions]:
        """Inputs -> tokens (B, N, D), the embed hooks applied, and their positions."""
        raise NotImplementedError(f'{type(self).__name__} does not say how its inputs become tokens (tokens)')

    def run_block(self, i: int, x: torch.Tensor, pos: Positions, *block_args: Any) -> torch.Tensor:
        """Block ``i`` (checkpointed if ``grad_checkpointing``; ``attn_input=`` if used), then the after_block hooks."""
        block = self._blocks()[i]
        stack = self.encoding_stack
        hook = stack.attn_input_fn(i, pos)  # None unless an encoding uses attn_input (LaPE)
        extra: dict[str, Any] = {} if hook is None else {'attn_input': hook}
        if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
            x = checkpoint(block, x, pos, *block_args, use_reentrant=False, **extra)
        else:
            x = block(x, pos, *block_args, **extra)
        return stack.after_block(i, x, pos)

    def run_blocks(self, x: torch.Tensor, pos: Positions, *block_args: Any) -> torch.Tensor:
        """Every block in order: (B, N, D) -> (B, N, D)."""
        for i in range(len(self._blocks())):
            x = self.run_block(i, x, pos, *block_args)
        return x

    def _blocks(self) -> Sequence[nn.Module]:
        return cast(Sequence[nn.Module], self.blocks)  # the subclass's: a ModuleList, or timm's Sequential

    def encode(self, *inputs: Any) -> torch.Tensor:
        """``tokens(*inputs)``, then ``run_blocks``."""
        x, pos = self.tokens(*inputs)
        return self.run_blocks(x, pos)


__all__ = [
    'EncodingHost',
    'PEBackbone',
    'PEBlock',
    'backbone_encodings',
    'build_backbone_encodings',
    'check_backbone_encoding',
    'check_one_rotation',
    'pe_blocks',
    'position_kind',
    'rotary_encodings',
]
