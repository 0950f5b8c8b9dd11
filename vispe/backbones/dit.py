"""DiT (Peebles and Xie, ICCV 2023) with vispe positions and encodings: patch tokens -> ``depth`` adaLN-Zero blocks
conditioned on c = t_emb + y_emb (+ crop_emb) -> final adaLN + Linear -> unpatchify; output 0 at init."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import torch
from timm.layers import Format, GELUTanh, Mlp, PatchEmbed
from torch import nn

from vispe.attention import Attention
from vispe.backbones.base import PEBackbone
from vispe.backbones.common import (
    check_channels,
    check_image_dims,
    check_img_size,
    check_input_dtype,
    check_patch_multiple,
    check_rates,
    check_size,
    use_patch_conv,
)
from vispe.encodings.base import Encoding
from vispe.encodings.build import EncodingSpec
from vispe.positions import Positions, build_position_sampler, grid_positions
from vispe.registry import MODELS

#: width, depth and heads of the paper's sizes (Table 1), plus 'Ti', small enough to train on a CPU
DIT_SIZES: dict[str, dict[str, int]] = {
    'Ti': dict(embed_dim=128, depth=4, num_heads=4),
    'S': dict(embed_dim=384, depth=12, num_heads=6),
    'B': dict(embed_dim=768, depth=12, num_heads=12),
    'L': dict(embed_dim=1024, depth=24, num_heads=16),
    'XL': dict(embed_dim=1152, depth=28, num_heads=16),
}


def frequency_embedding(t: torch.Tensor, dim: int = 256, max_period: float = 10000.0) -> torch.Tensor:
    """(...,) scalars -> (..., dim) float32 [cos(t w_i), sin(t w_i)], w_i = max_period^(-i / (dim/2)) (DiT)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[..., None] * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: x (B, N, D) * (1 + scale) + shift, with shift and scale (B, 1, D)."""
    return x * (1 + scale) + shift


def patchify(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, h*p, w*p) -> (B, h*w, p*p*C), each token's channels ordered (row in patch, col in patch, C)."""
    B, C, H, W = x.shape
    p = patch_size
    x = x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)  # (B, h, w, p, p, C)
    return x.reshape(B, (H // p) * (W // p), p * p * C)


def _linear(layers: nn.Sequential, index: int) -> nn.Linear:
    return cast(nn.Linear, layers[index])


def unpatchify(x: torch.Tensor, patch_size: int, grid: Sequence[int]) -> torch.Tensor:
    """(B, h*w, p*p*C) -> (B, C, h*p, w*p) for the (h, w) token grid; the inverse of ``patchify``."""
    (h, w), p = grid, patch_size
    B, N, K = x.shape
    C = K // (p * p)
    x = x.reshape(B, h, w, p, p, C).permute(0, 5, 1, 3, 2, 4)  # (B, C, h, p, w, p)
    return x.reshape(B, C, h * p, w * p)


class TimestepEmbedder(nn.Module):
    """t (B,) in DiT's scale [0, 1000] -> 256-channel frequency embedding -> Linear-SiLU-Linear -> (B, D)."""

    def __init__(self, dim: int, frequency_dim: int = 256) -> None:
        super().__init__()
        self.frequency_dim = frequency_dim
        self.mlp = nn.Sequential(nn.Linear(frequency_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(frequency_embedding(t, self.frequency_dim).to(_linear(self.mlp, 0).weight.dtype))


class LabelEmbedder(nn.Module):
    """y (B,) -> (B, D) from num_classes + 1 rows, the last the null class; training drops labels to it at
    ``dropout_prob``."""

    def __init__(self, num_classes: int, dim: int, dropout_prob: float = 0.1) -> None:
        super().__init__()
        self.num_classes, self.dropout_prob = num_classes, dropout_prob
        self.embedding_table = nn.Embedding(num_classes + 1, dim)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if self.training and self.dropout_prob > 0:
            drop = torch.rand(y.shape[0], device=y.device) < self.dropout_prob
            y = torch.where(drop, torch.full_like(y, self.num_classes), y)
        return self.embedding_table(y)


class CropEmbedder(nn.Module):
    """Crop micro-condition: (B, 4) box (top, left, height, width) in fractions of the image -> (B, D); zero at init."""

    def __init__(self, dim: int, frequency_dim: int = 256, scale: float = 1000.0) -> None:
        super().__init__()
        self.frequency_dim, self.scale = frequency_dim, scale
        self.mlp = nn.Sequential(nn.Linear(4 * frequency_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, crop: torch.Tensor) -> torch.Tensor:
        emb = frequency_embedding(crop * self.scale, self.frequency_dim).flatten(1)  # (B, 4 * frequency_dim)
        return self.mlp(emb.to(_linear(self.mlp, 0).weight.dtype))


class DiTBlock(nn.Module):
    """adaLN-Zero block: pre-norm attention and MLP, each modulated (shift, scale) and gated by Linear(SiLU(c))."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        encodings: Mapping[str, Encoding] | nn.ModuleDict | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, num_heads, qkv_bias=True, encodings=encodings)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=GELUTanh)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(
        self,
        x: torch.Tensor,
        pos: Positions,
        c: torch.Tensor,
        attn_input: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        # x (B, N, D), c (B, D) -> six (B, 1, D); the positions second, as every vispe block takes them
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c)[:, None].chunk(6, -1)
        h = modulate(self.norm1(x), shift_msa, scale_msa)
        if attn_input is not None:  # the encodings' attn_input hook (LaPE): after the modulation, before attention
            h = attn_input(h)
        x = x + gate_msa * self.attn(h, pos)
        return x + gate_mlp * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class FinalLayer(nn.Module):
    """adaLN (shift, scale) then Linear to the p*p*C_out values of each patch: (B, N, D) -> (B, N, p*p*C_out)."""

    def __init__(self, dim: int, patch_size: int, out_chans: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(dim, patch_size * patch_size * out_chans)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c)[:, None].chunk(2, dim=-1)  # (B, 1, D) each
        return self.linear(modulate(self.norm_final(x), shift, scale))


def _linears(module: nn.Module) -> Iterator[nn.Linear]:
    """The Linear layers under ``module``, skipping encodings (they initialise themselves)."""
    for child in module.children():
        if isinstance(child, nn.Linear):
            yield child
        elif not isinstance(child, Encoding):
            yield from _linears(child)


@MODELS.register_module()
class DiT(PEBackbone):
    """Diffusion transformer (Peebles and Xie, ICCV 2023) with vispe encodings.

    Args:
        img_size: training image size (int or (H, W)); with ``patch_size`` it fixes the training grid ``grid_size``.
        patch_size: p.
        in_chans: C (4 for SD latents, 3 for pixels).
        embed_dim: model width (see ``DIT_SIZES``).
        depth: blocks.
        num_heads: attention heads, dividing embed_dim.
        mlp_ratio: MLP width over embed_dim.
        num_classes: classes; the label table has one more row, the null class.
        class_dropout_prob: training label dropout for classifier-free guidance.
        learn_sigma: output 2C channels (prediction and variance).
        encoding: a name, config dict or list of them (``ape_sincos``: DiT's own).
        position_sampler: training-time position sampler (a config dict or a callable); None: the grid's own.
        crop_condition: add the crop box micro-condition to c.

    ``forward(x, t, y, crop=None, noise_level=None)``: t (B,) in [0, 1000], y (B,) long (None or num_classes: the null
    class), crop (B, 4) or None (the full image) -> (B, C_out, H, W).
    """

    #: the embeddings before the first block (layer 0 of layer-wise lr decay, with the model-level encodings)
    stem_prefixes = ('x_embedder', 't_embedder', 'y_embedder', 'crop_embedder')

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        patch_size: int = 2,
        in_chans: int = 3,
        embed_dim: int = 384,
        depth: int = 12,
        num_heads: int = 6,
        mlp_ratio: float = 4.0,
        num_classes: int = 1000,
        class_dropout_prob: float = 0.1,
        learn_sigma: bool = False,
        encoding: EncodingSpec = 'ape_sincos',
        position_sampler: Any = None,
        crop_condition: bool = False,
    ) -> None:
        super().__init__()
        check_img_size('DiT', img_size, patch_size, patch_pair=False)
        img_size = check_size('DiT', 'img_size', img_size)
        check_rates('DiT', class_dropout_prob=class_dropout_prob)
        self.patch_size, self.in_chans, self.num_classes = patch_size, in_chans, num_classes
        self.out_chans = 2 * in_chans if learn_sigma else in_chans
        self.embed_dim, self.num_heads, self.learn_sigma = embed_dim, num_heads, learn_sigma
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)

        self.x_embedder = PatchEmbed(
            img_size, patch_size, in_chans, embed_dim, flatten=False, output_fmt=Format.NHWC, strict_img_size=False
        )
        use_patch_conv(self.x_embedder)
        self.t_embedder = TimestepEmbedder(embed_dim)
        self.y_embedder = LabelEmbedder(num_classes, embed_dim, class_dropout_prob)
        self.crop_embedder = CropEmbedder(embed_dim) if crop_condition else None
        per_layer = self.build_encodings(encoding, embed_dim, num_heads, depth, self.grid_size)
        self.blocks = nn.ModuleList([DiTBlock(embed_dim, num_heads, mlp_ratio, per_layer[i]) for i in range(depth)])
        self.final_layer = FinalLayer(embed_dim, patch_size, self.out_chans)
        self.position_sampler = build_position_sampler(position_sampler, grid=self.grid_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DiT's init: xavier-uniform Linears, N(0, 0.02) label table and timestep MLP, zero adaLN and final layer."""
        for layer in _linears(self):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
        proj = self.x_embedder.proj
        nn.init.xavier_uniform_(proj.weight.view(proj.weight.shape[0], -1))
        if proj.bias is not None:
            nn.init.zeros_(proj.bias)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        for embedder in (self.t_embedder, self.crop_embedder):
            if embedder is not None:
                nn.init.normal_(_linear(embedder.mlp, 0).weight, std=0.02)
                nn.init.normal_(_linear(embedder.mlp, 2).weight, std=0.02)
        blocks = [cast(DiTBlock, blk) for blk in self.blocks]
        zero = [_linear(blk.adaLN_modulation, -1) for blk in blocks] + [_linear(self.final_layer.adaLN_modulation, -1)]
        zero += [self.final_layer.linear] + ([_linear(self.crop_embedder.mlp, 2)] if self.crop_embedder else [])
        for layer in zero:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    # no_weight_decay and group_matcher: EncodingHost's, from the encodings' declarations

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    # --- forward ---------------------------------------------------------------------------------------------
    def _check_size(self, height: int, width: int) -> None:
        check_patch_multiple('DiT', (height, width), (self.patch_size, self.patch_size))

    def tokens(self, x: torch.Tensor, noise_level: torch.Tensor | None = None) -> tuple[torch.Tensor, Positions]:
        """Images (B, C, H, W) -> tokens (B, h*w, D), embed hooks applied, and positions (with ``noise_level``)."""
        check_image_dims('DiT', x.shape)
        check_channels('DiT', 'the input', x.shape, self.x_embedder.proj.weight.shape[1])
        check_input_dtype('DiT', x, self.x_embedder.proj.weight)
        self._check_size(*x.shape[-2:])
        x = self.x_embedder(x)  # (B, h, w, D)
        B, h, w, D = x.shape
        pos = grid_positions(h, w, 0, x.device)
        if noise_level is not None:
            pos = replace(pos, noise_level=noise_level)
        if self.training and self.position_sampler is not None:
            pos = self.position_sampler(pos, B)  # per-sample coords (B, h*w, 2); pos.grid stays (h, w)
        x = x.reshape(B, h * w, D)
        x = self.encoding_stack.embed(x, pos)
        return x, pos

    def condition(self, t: torch.Tensor, y: torch.Tensor | None, crop: torch.Tensor | None, batch: int) -> torch.Tensor:
        """c = t_emb + y_emb (+ crop_emb): (B, D)."""
        t = t.expand(batch) if t.dim() == 0 else t
        if y is None:
            y = torch.full((batch,), self.num_classes, dtype=torch.long, device=t.device)
        c = self.t_embedder(t) + self.y_embedder(y)
        if self.crop_embedder is not None:
            if crop is None:
                crop = torch.tensor([0.0, 0.0, 1.0, 1.0], device=t.device).expand(batch, 4)
            c = c + self.crop_embedder(crop)
        return c

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        y: torch.Tensor | None,
        crop: torch.Tensor | None = None,
        noise_level: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, C, H, W) at network time ``t`` (B,) with labels ``y`` -> (B, C_out, H, W); ``noise_level``: the same
        time in [0, 1] (1: pure noise), for the strategies that follow it (DyPE)."""
        tokens, pos = self.tokens(x, noise_level)  # (B, h*w, D)
        c = self.condition(t, y, crop, x.shape[0])  # (B, D)
        tokens = self.run_blocks(tokens, pos, c)
        out = self.final_layer(tokens, c)  # (B, h*w, p*p*C_out)
        assert pos.grid is not None  # the token grid: tokens() made the positions of the (h, w) patches
        return unpatchify(out, self.patch_size, pos.grid)  # (B, C_out, H, W)


@MODELS.register_module(name='dit_preset')
def dit(name: str = 'DiT-S/2', **overrides: Any) -> DiT:
    """The paper's named models as a ``DiT``, registered as ``dit_preset``.

    Args:
        name: 'DiT-{Ti,S,B,L,XL}/{patch}': the size sets embed_dim, depth and num_heads (``DIT_SIZES``).
        **overrides: passed to ``DiT`` over the preset's values.
    """
    return DiT(**{**dit_preset_args(name), **overrides})


def dit_preset_args(name: str) -> dict[str, int]:
    """A preset name -> its DiT arguments; ValueError for an unknown name."""
    match = re.fullmatch(r'DiT-(\w+)/(\d+)', name)
    if match is None or match.group(1) not in DIT_SIZES:
        sizes = ', '.join(f'DiT-{s}/2' for s in DIT_SIZES)
        raise ValueError(f'unknown DiT name {name!r}; use DiT-<size>/<patch> with a size among: {sizes}')
    return {**DIT_SIZES[match.group(1)], 'patch_size': int(match.group(2))}


__all__ = ['DIT_SIZES', 'DiT', 'DiTBlock', 'dit', 'dit_preset_args', 'frequency_embedding', 'patchify', 'unpatchify']
