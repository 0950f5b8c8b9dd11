"""Absolute baselines: a learned table (ViT / DeiT) and fixed 2D sin-cos (MAE / DiT), each with LaPE as an option
(``vispe.encodings.lape.LayerAdaptive``, ``lape=True``); and ViTAR's fuzzy table lookup (``sample_table``,
ape_learned's ``grid_sample`` strategy, beside the ``fuzzy`` position sampler)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from timm.layers import resample_abs_pos_embed, trunc_normal_
from torch import nn

from vispe.encodings.base import GridTableCache, check_positive
from vispe.encodings.lape import LayerAdaptive
from vispe.encodings.rotary import rotary_sections
from vispe.positions import Positions, autocast_off, is_symbolic
from vispe.registry import ENCODINGS


@torch.fx.wrap
def grid_table(
    table: torch.Tensor, grid: list[int], train_grid: list[int], interpolation: str, antialias: bool = True
) -> torch.Tensor:
    """A learned (1, h*w, D) ``table`` of the ``train_grid`` for ``grid``: itself there, resampled elsewhere (timm's
    ``resample_abs_pos_embed`` with ``interpolation``, antialiased when ``antialias`` and not ``nearest``).

    An FX leaf (``torch.fx.wrap``): the choice needs the grid as ints, so an FX graph calls this at run time, and a
    graph traced at one size serves every size exactly as the eager model does; TorchScript can compile it.
    Symbolic sizes (torch.export, dynamic torch.compile) always take the resampling path, which is the identity
    at the training grid (to the bit for bicubic and bilinear at scale 1), instead of a branch on the size that
    would specialise the graph to the training grid.
    """
    if len(grid) == 3:
        return video_table(table, grid, train_grid, interpolation, antialias)
    concrete = isinstance(grid[0], int) and isinstance(grid[1], int)  # SymInts are not ints (Proxies never get here)
    if concrete and grid[0] == train_grid[0] and grid[1] == train_grid[1]:
        return table
    return resample_abs_pos_embed(
        table,
        new_size=grid,
        old_size=train_grid,
        num_prefix_tokens=0,
        interpolation=interpolation,
        antialias=antialias and interpolation != 'nearest',
    )


def video_table(
    table: torch.Tensor, grid: list[int], train_grid: list[int], interpolation: str, antialias: bool = True
) -> torch.Tensor:
    """A learned (1, t*h*w, D) table of the (t, h, w) ``train_grid`` resampled to ``grid``, each axis separately:
    space first, every frame's (h, w) table as one image (timm's ``resample_abs_pos_embed`` with ``interpolation``,
    the frames side by side in the channels), then time, every spatial entry's sequence linearly (nearest under
    ``nearest``; half-pixel centres, as the spatial resampling), so frame count and frame size change independently."""
    t0, h0, w0 = train_grid[0], train_grid[1], train_grid[2]  # indexing, not unpacking: TorchScript compiles this
    t1, h1, w1 = grid[0], grid[1], grid[2]
    if t1 == t0 and h1 == h0 and w1 == w0:
        return table
    dim = table.shape[-1]
    frames = table.reshape(1, t0, h0 * w0, dim).transpose(1, 2).reshape(1, h0 * w0, t0 * dim)  # frames in channels
    if h1 != h0 or w1 != w0:
        frames = resample_abs_pos_embed(
            frames,
            new_size=[h1, w1],
            old_size=[h0, w0],
            num_prefix_tokens=0,
            interpolation=interpolation,
            antialias=antialias and interpolation != 'nearest',
        )
    series = frames.reshape(h1 * w1, t0, dim).permute(0, 2, 1)  # (h1*w1, D, t0): each entry's sequence in time
    if t1 != t0 and interpolation == 'nearest':
        series = F.interpolate(series, size=t1, mode='nearest')
    elif t1 != t0:
        series = F.interpolate(series, size=t1, mode='linear', align_corners=False)
    return series.permute(2, 0, 1).reshape(1, t1 * h1 * w1, dim)  # (t, h, w) row-major


def sample_table(table: torch.Tensor, grid: Sequence[int], u: torch.Tensor) -> torch.Tensor:
    """Bilinear lookup of a (1, h*w, D) row-major ``table`` of an h x w ``grid`` at continuous (..., N, 2) (row, col)
    cell coordinates ``u`` -> (..., N, D).

    Entry (r, c) of the table sits at the integer point u = (r, c), and coordinates outside [0, h-1] x [0, w-1] are
    clamped to the border: ``F.grid_sample(mode='bilinear', align_corners=True, padding_mode='border')`` over the
    table as an image, written as four gathers so that an integer point returns its entry to the bit (grid_sample
    normalises to [-1, 1] and back, and is off by ~1e-6 there) and gradients reach the table through the gathers.
    The weights are float32 (under autocast too); the result is in the table's dtype.
    """
    h, w = int(grid[0]), int(grid[1])
    flat = table[0]  # (h*w, D)
    with autocast_off(u):
        u = u.float()
        r = u[..., 0].clamp(0, h - 1)
        c = u[..., 1].clamp(0, w - 1)
        r0, c0 = r.floor(), c.floor()
        fr, fc = (r - r0)[..., None].to(flat.dtype), (c - c0)[..., None].to(flat.dtype)
        r0i, c0i = r0.long(), c0.long()
        r1i, c1i = (r0i + 1).clamp(max=h - 1), (c0i + 1).clamp(max=w - 1)
        top = flat[r0i * w + c0i] * (1 - fc) + flat[r0i * w + c1i] * fc
        bottom = flat[r1i * w + c0i] * (1 - fc) + flat[r1i * w + c1i] * fc
        return top * (1 - fr) + bottom * fr


@ENCODINGS.register_module(name='ape_learned')
class ApeLearned(LayerAdaptive):
    """Learned absolute position table (Dosovitskiy et al., ICLR 2021; DeiT).

    A (1, h*w, D) table for the training grid, trunc-normal std 0.02, added to the patch tokens
    (prefix tokens carry no position). At another grid the table is resampled with ``strategy``
    (bicubic by default, as DeiT and timm do; bilinear and nearest selectable), as timm's ViT resamples it
    (``resample_abs_pos_embed``, ``align_corners=False``): antialiased by default. DeiT's and MAE's
    ``interpolate_pos_embed`` do not antialias, and PyTorch's antialiased bicubic is another kernel (Keys' a = -0.5,
    the taps past the border dropped; the plain one has a = -0.75 and repeats the border), so the two differ at
    every new grid, larger or smaller; ``antialias=False`` gives theirs (bilinear differs only when shrinking; nearest
    never antialiases).

    Video: a (1, t*h*w, D) table of the (t, h, w) training grid (ViViT's and VideoMAE's learned table), resampled per
    axis (``video_table``): frames with ``strategy``, time linearly (nearest under ``nearest``), so frame count and
    frame size change separately. ``grid_sample`` is for images only.

    ``grid_sample`` (ViTAR's fuzzy positional encoding, Fan et al. 2024): the table is looked up bilinearly at each
    token's coordinates (``sample_table``) instead of resampled as an image: a token at (row, col) of an h x w grid
    reads the table at u = (coord + 1/2) * G / span - 1/2 per axis (G the table's grid, span the grid, or rpe2d's
    extent), i.e. cell centres matched, clamped to the border. Trained with the ``fuzzy`` position sampler, which
    jitters every token's coordinates uniformly within its cell, the table is read between its entries; evaluated
    on the plain grid, it is read at the exact (rescaled) cell centres, and at the training grid it is the table
    itself, bit for bit. Cost: the table itself at the training grid; elsewhere, or with sampled positions, four
    (N, D) gathers and a weighted sum per forward (or per block with LaPE).

    LaPE (``lape=True``, ``LayerAdaptive``): the table, resampled as above, enters every block's attention input
    through that block's own LayerNorm instead of the tokens.

    Shapes: embed x (B, h*w, D) -> (B, h*w, D).

    Weight decay: none on ``pos_embed``, as ViT and DeiT train it (timm's ``no_weight_decay`` names the table):
    decay would pull every position toward the zero vector, i.e. toward no position at all.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (``grid_table`` is a scriptable leaf); its Python code
    does not script: its hook takes ``Positions`` (see VisionTransformerPE), and ``strategy`` is a property over an
    optional attribute.

    Converting a timm ViT (``learned_pos_embed``): the model's ``pos_embed`` becomes this table, resampled (timm's
    bicubic ``resample_abs_pos_embed``) when its grid differs.

    Args:
        dim: model width D (the backbone supplies its embed_dim).
        grid_size: (h, w) of the table, the training grid in patches, or (t, h, w) for video (the backbone supplies its
            token grid; a config may set another, e.g. the grid of a pretrained table).
        lape: LaPE: the table enters each block's attention input through a LayerNorm of its own per block, instead of
            being added to the tokens once.
        depth: the number of blocks, one LayerNorm each with ``lape`` (the backbone supplies it).
        lape_progressive: with ``lape``, block l's LayerNorm reads block l-1's normalised table, as the authors' code
            (``LayerAdaptive``).
        antialias: antialias the bicubic and bilinear resampling, as timm does; False: plain ``F.interpolate``, as DeiT
            and MAE resize a pretrained table.
    """

    strategies = ('bicubic', 'bilinear', 'nearest', 'grid_sample')
    opt_in_strategies = ('grid_sample',)  # ViTAR's lookup, for models trained with the fuzzy sampler
    no_weight_decay_params = ('pos_embed',)
    learned_pos_embed = True
    ndims = (2, 3)

    def __init__(
        self,
        dim: int,
        grid_size: Sequence[int] = (14, 14),
        lape: bool = False,
        depth: int | None = None,
        lape_progressive: bool = False,
        antialias: bool = True,
    ) -> None:
        super().__init__()
        if len(grid_size) not in (2, 3) or min(int(g) for g in grid_size) < 1:
            raise ValueError(
                f"ape_learned: grid_size is the table's grid, (h, w) for images or (t, h, w) for video, positive "
                f'ints; got {tuple(grid_size)}'
            )
        self.grid_size: tuple[int, ...] = tuple(int(g) for g in grid_size)
        self.antialias = bool(antialias)
        self.pos_embed = nn.Parameter(torch.zeros(1, math.prod(self.grid_size), dim))
        self.init_lape(lape, dim, depth, lape_progressive)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        trunc_normal_(self.pos_embed, std=0.02)

    def table(self, grid: tuple[int, ...]) -> torch.Tensor:
        """The (1, h*w, D) table for ``grid`` ((1, t*h*w, D) for video), resampled from the training grid when they
        differ."""
        return grid_table(self.pos_embed, list(grid), list(self.grid_size), self.strategy, self.antialias)

    def adopt_pos_embed(self, table: torch.Tensor) -> None:
        if len(self.grid_size) != 2:
            raise ValueError(f'ape_learned: a timm ViT table is an image grid; this one is {self.grid_size}')
        if table.shape[1] != self.pos_embed.shape[1]:
            side = int(round(table.shape[1] ** 0.5))
            table = resample_abs_pos_embed(
                table, new_size=list(self.grid_size), old_size=[side, side], num_prefix_tokens=0
            )
        with torch.no_grad():
            self.pos_embed.copy_(table)

    def pos_embed_table(self) -> torch.Tensor:
        return self.pos_embed.data

    def position_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        if self.strategy == 'grid_sample':
            return self.sampled_table(pos).to(dtype)
        if pos.layout is not None:
            return self.layout_table(pos).to(dtype)
        if pos.grid is None or len(pos.grid) != len(self.grid_size):
            kind = 'an image grid (h, w)' if len(self.grid_size) == 2 else 'a video grid (t, h, w)'
            raise ValueError(
                f'ape_learned with a {self.grid_size} table needs the tokens to form {kind}, got grid {pos.grid}'
            )
        return self.table(tuple(pos.grid)).to(dtype)

    def sampled_table(self, pos: Positions) -> torch.Tensor:
        """The ``grid_sample`` strategy: the table read at each token's coordinates, (1 or B, N, D) (the class
        docstring has the mapping); the table itself for the plain training grid."""
        if pos.layout is None and pos.grid is None:
            raise ValueError('ape_learned needs the tokens to form a grid (positions with a grid)')
        if len(self.grid_size) != 2:
            raise ValueError(
                "ape_learned: strategy 'grid_sample' reads image tables; for video use 'bicubic', "
                "'bilinear' or 'nearest'"
            )
        grid = pos.grid
        if pos.key is not None and grid is not None and not is_symbolic(*grid) and tuple(grid) == self.grid_size:
            return self.pos_embed  # the training grid's own integer positions: the entries themselves
        coords = pos.coords
        span = pos.span_tensor().clamp(min=1.0)  # (2,), or per token in a mixed batch (padding: no grid)
        scale = torch.tensor(self.grid_size, dtype=torch.float32, device=coords.device) / span
        table = sample_table(self.pos_embed, self.grid_size, (coords.float() + 0.5) * scale - 0.5)
        if pos.layout is not None:  # prefix and padding tokens carry no position
            table = torch.where(pos.layout.patch_mask(coords.device)[..., None], table, table.new_zeros(()))
        return table if table.dim() == 3 else table[None]

    def layout_table(self, pos: Positions) -> torch.Tensor:
        """A mixed batch: (B, T, D), each token's entry of the table resampled to its own image's grid (zero on
        prefix and padding): the tables of the distinct grids one after another, gathered at offset + cell."""
        layout = pos.layout
        assert layout is not None
        tables = [self.table(grid)[0] for grid in layout.distinct_grids]
        stacked = torch.cat([*tables, tables[0].new_zeros(1, tables[0].shape[-1])])  # the last row: padding
        return stacked[layout.table_index(pos.coords.device)]


def check_sincos_width(dim: int) -> None:
    """Sin-cos features take the width in four quarters (sin, cos of rows, columns)."""
    if dim % 4:
        raise ValueError(f'ape_sincos needs a model width divisible by 4 (sin, cos of rows, columns), got {dim}')


def sincos_embed(coords: torch.Tensor, dim: int, temperature: float = 10000.0, ndim: int = 2) -> torch.Tensor:
    """Fixed sin-cos features of (..., N, ndim) coordinates -> (..., N, dim), in float32 (``ndim`` given, not read
    from the coordinates' shape, which an FX trace cannot branch on).

    Images, (row, col): the first half of the channels encodes the column, the second the row (MAE and DiT order),
    each as [sin(p * w_i), cos(p * w_i)] with w_i = 1 / temperature^(i / (dim/4)), i < dim/4. Video, (t, row, col):
    the column, the row, then time, each axis n_a frequencies w_i = 1 / temperature^(i / n_a) with the n_a split as
    rope_axial splits its pairs (``rotary_sections``: even where dim / 2 divides by 3, time on the fewest).
    """
    if ndim == 2:
        check_sincos_width(dim)
    parts = []
    for axis, n in reversed(list(enumerate(rotary_sections(dim, ndim)))):  # the last axis (column) first
        omega = 1.0 / temperature ** (torch.arange(n, device=coords.device, dtype=torch.float32) / n)
        angles = coords[..., axis, None].float() * omega
        parts += [angles.sin(), angles.cos()]
    return torch.cat(parts, dim=-1)


@ENCODINGS.register_module(name='ape_sincos')
class ApeSincos(LayerAdaptive):
    """Fixed 2D sin-cos absolute embedding (MAE, He et al. 2022; DiT, Peebles and Xie 2023), and its 3D form on
    video grids (``sincos_embed``: a third of the frequencies on time, as rope_axial splits them).

    Computed from the coordinates on the fly, so any grid (and any sampled coordinates) works and
    nothing is stored in a checkpoint. Shapes: embed x (B, N, D) -> (B, N, D).

    Weight decay: nothing to declare, it has no parameters.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), and its table comes from a ``GridTableCache``, a
    Python dict keyed by tuples of sizes, devices and dtypes and filled by a lambda, neither of which TorchScript has.

    LaPE (``lape=True``, ``LayerAdaptive``): the fixed table enters each block's attention input through a
    LayerNorm of its own per block (DiT: after the block's adaLN modulation), instead of the tokens; its LayerNorms
    are then the encoding's only parameters.

    Args:
        dim: model width D; must be divisible by 4 (two axes x sin/cos) for images, even for video.
        temperature: base of the frequency ladder, > 0.
        lape: LaPE: the table enters each block's attention input through a LayerNorm of its own per block, instead of
            being added to the tokens once.
        depth: the number of blocks, one LayerNorm each with ``lape`` (the backbone supplies it).
        ndim: position axes (the backbone supplies it: 2 for images, 3 for video), for the width check.
        lape_progressive: with ``lape``, block l's LayerNorm reads block l-1's normalised table, as the authors' code
            (``LayerAdaptive``).
    """

    ndims = (2, 3)

    def __init__(
        self,
        dim: int,
        temperature: float = 10000.0,
        lape: bool = False,
        depth: int | None = None,
        ndim: int = 2,
        lape_progressive: bool = False,
    ) -> None:
        super().__init__()
        if ndim == 2:
            check_sincos_width(dim)
        rotary_sections(dim, ndim)  # video: an even width, a pair or more per axis
        self.ndim = ndim
        check_positive('ape_sincos', temperature=temperature)
        self.dim = dim
        self.temperature = temperature
        self._cache = GridTableCache()
        self.init_lape(lape, dim, depth, lape_progressive)

    def position_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        # one table per (grid, prefix, device, dtype): a bf16 model does not cast the float32 table every forward
        return self._cache.get(
            pos.cache_key(dtype), lambda: sincos_embed(pos.coords, self.dim, self.temperature, self.ndim).to(dtype)
        )
