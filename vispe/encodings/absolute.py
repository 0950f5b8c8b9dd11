"""Absolute baselines: a learned table (ViT, DeiT) and fixed sin-cos (MAE, DiT), each with LaPE as an option."""

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
    """The learned (1, h*w, D) ``table`` of ``train_grid`` at ``grid``: itself, or resampled by timm's
    ``resample_abs_pos_embed``. An FX leaf; symbolic sizes always resample (the identity at the training grid)."""
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
    """A (1, t*h*w, D) table resampled per axis: each frame as an image, then time linearly (``nearest``: nearest)."""
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
    """Bilinear lookup of a (1, h*w, D) ``table`` of ``grid`` at (..., N, 2) (row, col) cell coordinates ``u``, clamped
    to the border -> (..., N, D): four gathers, so an integer point returns its entry to the bit."""
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
    """Learned (1, h*w, D) table (ViT; DeiT) added to the patch tokens, resampled by ``strategy`` at other grids as
    timm's ViT does, antialiased (departure: DeiT's and MAE's is not, ``antialias=False``). ``grid_sample`` (ViTAR,
    Fan et al. 2024): read bilinearly at u = (coord + 1/2) G / span - 1/2 per axis (for the ``fuzzy`` sampler).

    Args:
        dim: model width.
        grid_size: (h, w) or (t, h, w) of the table, the training grid.
        lape: LaPE (``LayerAdaptive``).
        depth: the number of blocks (LaPE's norms).
        lape_progressive: LaPE's chained norms (``LayerAdaptive``).
        antialias: antialias bicubic and bilinear resampling.
    """

    strategies = ('bicubic', 'bilinear', 'nearest', 'grid_sample')
    opt_in_strategies = ('grid_sample',)  # ViTAR's lookup, for models trained with the fuzzy sampler
    no_weight_decay_params = ('pos_embed',)
    weight_decay_note = 'as ViT and DeiT train it'
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
        """The ``grid_sample`` strategy's (1 or B, N, D) table."""
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
        """A mixed batch: (B, T, D), each token its own image's entry, zero on prefix and padding tokens."""
        layout = pos.layout
        assert layout is not None
        tables = [self.table(grid)[0] for grid in layout.distinct_grids]
        stacked = torch.cat([*tables, tables[0].new_zeros(1, tables[0].shape[-1])])  # the last row: padding
        return stacked[layout.table_index(pos.coords.device)]


def check_sincos_width(dim: int) -> None:
    if dim % 4:
        raise ValueError(f'ape_sincos needs a model width divisible by 4 (sin, cos of rows, columns), got {dim}')


def sincos_embed(coords: torch.Tensor, dim: int, temperature: float = 10000.0, ndim: int = 2) -> torch.Tensor:
    """Sin-cos features of (..., N, ndim) coordinates -> (..., N, dim) float32: column, row (then time), each
    [sin(p w_i), cos(p w_i)], w_i = 1 / temperature^(i / n), n pairs per axis (``rotary_sections``)."""
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
    """Fixed sin-cos embedding (MAE; DiT), of image or video grids (``sincos_embed``).

    Args:
        dim: model width (divisible by 4 for images, even for video).
        temperature: base of the frequency ladder.
        lape: LaPE (``LayerAdaptive``).
        depth: the number of blocks (LaPE's norms).
        ndim: position axes.
        lape_progressive: LaPE's chained norms (``LayerAdaptive``).
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
