"""The vispe ViT on a list of (C, H_i, W_i) images of different sizes (``vispe.layout``): laid out by ``mixed_sizes``,
each attending only within itself, so every output equals that of the image alone, to float tolerance."""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from timm.layers import Format, PatchEmbed
from torch import nn

from vispe.attention import may_use_flex
from vispe.backbones.common import check_channels
from vispe.encodings.stack import EncodingStack
from vispe.layout import TokenLayout, make_layout
from vispe.positions import Positions


class MixedSizeViT(Protocol):
    """What this module reads of the ViT it serves; a protocol, so that it does not import the ViT that imports it."""

    training: bool
    mixed_sizes: str
    pack_tokens: int | None

    @property
    def patch_embed(self) -> Any: ...  # timm's PatchEmbed or another patch embedding
    @property
    def num_prefix_tokens(self) -> int: ...
    @property
    def position_sampler(self) -> Any: ...
    @property
    def encoding_stack(self) -> EncodingStack: ...
    @property
    def cls_token(self) -> torch.Tensor | None: ...
    @property
    def reg_token(self) -> torch.Tensor | None: ...
    @property
    def attn_pool(self) -> nn.Module | None: ...
    @property
    def pool_include_prefix(self) -> bool: ...
    @property
    def global_pool(self) -> str: ...

    def norm_pre(self, x: torch.Tensor) -> torch.Tensor: ...
    def pos_drop(self, x: torch.Tensor) -> torch.Tensor: ...
    def norm(self, x: torch.Tensor) -> torch.Tensor: ...
    def pool(self, x: torch.Tensor) -> torch.Tensor: ...
    def check_input(self, x: torch.Tensor) -> None: ...
    def run_blocks(self, x: torch.Tensor, pos: Positions, *block_args: Any) -> torch.Tensor: ...


def check_images(owner: str, images: list | tuple, in_chans: int | None = None) -> list[torch.Tensor]:
    """The images as a list of (C, H, W) tensors of one dtype and ``in_chans`` channels; ValueError otherwise."""
    if not images:
        raise ValueError(f'{owner}: got an empty list of images')
    bad = [i for i, x in enumerate(images) if not isinstance(x, torch.Tensor) or x.dim() != 3]
    if bad:
        shapes = [
            tuple(images[i].shape) if isinstance(images[i], torch.Tensor) else type(images[i]).__name__ for i in bad[:3]
        ]
        raise ValueError(
            f'{owner}: a list input holds one (C, H, W) tensor per image; items {bad[:3]} are {shapes} (a batch of '
            'one size is a (B, C, H, W) tensor, not a list)'
        )
    for i, x in enumerate(images):
        check_channels(owner, f'image {i} of the list', x.shape, in_chans or images[0].shape[0], one=True)
    if len({x.dtype for x in images}) > 1:
        dtypes = sorted({str(x.dtype) for x in images})
        raise ValueError(f'{owner}: the images of a list must share one dtype, got {dtypes}')
    return list(images)


def same_size(images: list[torch.Tensor]) -> bool:
    return all(x.shape == images[0].shape for x in images)


def _linear_patches(patch_embed: nn.Module) -> bool:
    """Whether ``patch_embed`` is timm's plain patchify conv, which one matmul over the unfolded patches computes."""
    proj = getattr(patch_embed, 'proj', None)
    return (
        type(patch_embed) is PatchEmbed
        and isinstance(proj, nn.Conv2d)
        and not patch_embed.dynamic_img_pad
        and not patch_embed.flatten
        and patch_embed.output_fmt == Format.NHWC
        and tuple(proj.kernel_size) == tuple(proj.stride) == tuple(patch_embed.patch_size)
        and tuple(proj.padding) == (0, 0)
        and tuple(proj.dilation) == (1, 1)
        and proj.groups == 1
    )


def embed_patches(model: MixedSizeViT, images: list[torch.Tensor]) -> torch.Tensor:
    """The patch tokens of every image, in input order, each row-major: (sum of h*w, D)."""
    patch_embed = model.patch_embed
    if _linear_patches(patch_embed):
        ph, pw = patch_embed.patch_size
        patches = torch.cat(
            [
                x.reshape(x.shape[0], x.shape[1] // ph, ph, x.shape[2] // pw, pw)
                .permute(1, 3, 0, 2, 4)
                .reshape(-1, x.shape[0] * ph * pw)
                for x in images
            ]
        )
        proj = patch_embed.proj
        return patch_embed.norm(F.linear(patches, proj.weight.flatten(1), proj.bias))
    by_size: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(images):
        by_size.setdefault(tuple(x.shape), []).append(i)
    embedded: list[torch.Tensor | None] = [None] * len(images)
    for indices in by_size.values():
        tokens = patch_embed(torch.stack([images[i] for i in indices]))  # (n, h, w, D)
        for i, t in zip(indices, tokens):
            embedded[i] = t.reshape(-1, t.shape[-1])
    return torch.cat(cast(list[torch.Tensor], embedded))


def mixed_tokens(model: MixedSizeViT, images: list[torch.Tensor]) -> tuple[torch.Tensor, Positions]:
    """A list of images -> tokens (B, T, D) in the model's layout, embed hooks applied, and their ``Positions``."""
    shapes = {tuple(x.shape): x for x in images}
    for x in shapes.values():
        model.check_input(x[None])
    patch = model.patch_embed.patch_size
    grids = [(-(-x.shape[-2] // patch[0]), -(-x.shape[-1] // patch[1])) for x in images]  # dynamic_img_pad: ceil
    layout = make_layout(grids, model.num_prefix_tokens, model.mixed_sizes, model.pack_tokens)
    x = layout.place(embed_patches(model, images))  # (B, T, D), zero on prefix and padding
    device = x.device
    pos = Positions(layout.coords(device), num_prefix=0, key=layout.key, layout=layout)
    if model.training and model.position_sampler is not None:
        pos = model.position_sampler(pos, layout.num_rows)
    x = model.encoding_stack.embed(x, pos)
    prefix: list[torch.Tensor] = [t for t in (model.cls_token, model.reg_token) if t is not None]
    if prefix:  # each image's prefix tokens (cls, registers) at the front of its segment, replacing what embed added
        x = layout.place_prefix(x, torch.cat(prefix, dim=1)[0])
    return model.norm_pre(model.pos_drop(x)), pos


def mixed_features(model: MixedSizeViT, images: list[torch.Tensor]) -> list[torch.Tensor]:
    """``forward_features`` of a list of images: per image its (P + h*w, D) final tokens."""
    x, pos = mixed_tokens(model, images)
    layout = cast(TokenLayout, pos.layout)
    layout.prepare(x.device, block_mask=may_use_flex(cast(nn.Module, model), x))  # the ViT is an nn.Module
    mask = layout.attn_mask(x.device)
    return layout.unpack(model.norm(model.run_blocks(x, pos, mask)))


def pool_list(model: MixedSizeViT, tokens: list[torch.Tensor]) -> torch.Tensor:
    """timm's pooling of each image's (P + n, D) tokens: (len(tokens), D)."""
    if model.attn_pool is None and not model.pool_include_prefix and model.global_pool in ('token', 'avg'):
        # timm's two common poolings, read off each image's tokens without stacking them first
        P = model.num_prefix_tokens
        if model.global_pool == 'token':
            return torch.stack([t[0] for t in tokens])
        return torch.stack([t[P:].mean(0) for t in tokens])
    by_length: dict[int, list[int]] = {}
    for i, t in enumerate(tokens):
        by_length.setdefault(t.shape[0], []).append(i)
    pooled: list[torch.Tensor | None] = [None] * len(tokens)
    for indices in by_length.values():
        for i, p in zip(indices, model.pool(torch.stack([tokens[i] for i in indices]))):
            pooled[i] = p
    return torch.stack(cast(list[torch.Tensor], pooled))


__all__ = ['MixedSizeViT', 'check_images', 'mixed_features', 'mixed_tokens', 'pool_list', 'same_size']
