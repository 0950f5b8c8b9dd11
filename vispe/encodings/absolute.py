"""Absolute baselines: a learned table (ViT / DeiT) and fixed 2D sin-cos (MAE / DiT)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from timm.layers import resample_abs_pos_embed, trunc_normal_
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache, check_positive
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@torch.fx.wrap
def grid_table(table: torch.Tensor, grid: list[int], train_grid: list[int], interpolation: str) -> torch.Tensor:
    """A learned (1, h*w, D) ``table`` of the ``train_grid`` for ``grid``: itself there, resampled elsewhere.

    An FX leaf (``torch.fx.wrap``): the choice needs the grid as ints, so an FX graph calls this at run time, and a
    graph traced at one size serves every size exactly as the eager model does; TorchScript can compile it.
    Symbolic sizes (torch.export, dynamic torch.compile) always take the resampling path, which is the identity
    at the training grid (to the bit for bicubic and bilinear at scale 1), instead of a branch on the size that
    would specialise the graph to the training grid.
    """
    concrete = isinstance(grid[0], int) and isinstance(grid[1], int)  # SymInts are not ints (Proxies never get here)
    if concrete and grid[0] == train_grid[0] and grid[1] == train_grid[1]:
        return table
    return resample_abs_pos_embed(
        table,
        new_size=grid,
        old_size=train_grid,
        num_prefix_tokens=0,
        interpolation=interpolation,
        antialias=interpolation != 'nearest',
    )


@ENCODINGS.register_module(name='ape_learned')
class ApeLearned(Encoding):
    """Learned absolute position table (Dosovitskiy et al., ICLR 2021; DeiT).

    A (1, h*w, D) table for the training grid, trunc-normal std 0.02, added to the patch tokens
    (prefix tokens carry no position). At another grid the table is resampled with ``strategy``
    (bicubic by default, as DeiT and timm do; bilinear and nearest selectable).

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
        dim (int): model width D (the backbone supplies its embed_dim).
        grid_size (Sequence[int]): (h, w) of the table, the training grid in patches (the backbone
            supplies its patch grid; a config may set another, e.g. the grid of a pretrained table).
            Defaults to (14, 14).
    """

    strategies = ('bicubic', 'bilinear', 'nearest')
    no_weight_decay_params = ('pos_embed',)
    learned_pos_embed = True

    def __init__(self, dim: int, grid_size: Sequence[int] = (14, 14)) -> None:
        super().__init__()
        self.grid_size: tuple[int, int] = (int(grid_size[0]), int(grid_size[1]))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid_size[0] * self.grid_size[1], dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        trunc_normal_(self.pos_embed, std=0.02)

    def table(self, grid: tuple[int, int]) -> torch.Tensor:
        """The (1, h*w, D) table for ``grid``, resampled from the training grid when they differ."""
        return grid_table(self.pos_embed, list(grid), list(self.grid_size), self.strategy)

    def adopt_pos_embed(self, table: torch.Tensor) -> None:
        if table.shape[1] != self.pos_embed.shape[1]:
            side = int(round(table.shape[1] ** 0.5))
            table = resample_abs_pos_embed(
                table, new_size=list(self.grid_size), old_size=[side, side], num_prefix_tokens=0
            )
        with torch.no_grad():
            self.pos_embed.copy_(table)

    def pos_embed_table(self) -> torch.Tensor:
        return self.pos_embed.data

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        if pos.layout is not None:
            return x + self.layout_table(pos).to(x.dtype)
        if pos.grid is None:
            raise ValueError('ape_learned needs the tokens to form a grid (positions with a grid)')
        return x + self.table(pos.grid).to(x.dtype)

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


def sincos_embed(coords: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed sin-cos features of (..., N, 2) (row, col) coordinates -> (..., N, dim), in float32.

    The first half of the channels encodes the column, the second the row (MAE and DiT order), each as
    [sin(p * w_i), cos(p * w_i)] with w_i = 1 / temperature^(i / (dim/4)), i < dim/4.
    """
    check_sincos_width(dim)
    omega = 1.0 / temperature ** (torch.arange(dim // 4, device=coords.device, dtype=torch.float32) / (dim / 4))
    parts = []
    for axis in (1, 0):  # column, then row
        angles = coords[..., axis, None].float() * omega
        parts += [angles.sin(), angles.cos()]
    return torch.cat(parts, dim=-1)


@ENCODINGS.register_module(name='ape_sincos')
class ApeSincos(Encoding):
    """Fixed 2D sin-cos absolute embedding (MAE, He et al. 2022; DiT, Peebles and Xie 2023).

    Computed from the coordinates on the fly, so any grid (and any sampled coordinates) works and
    nothing is stored in a checkpoint. Shapes: embed x (B, N, D) -> (B, N, D).

    Weight decay: nothing to declare, it has no parameters.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), and its table comes from a ``GridTableCache``, a
    Python dict keyed by tuples of sizes, devices and dtypes and filled by a lambda, neither of which TorchScript has.

    Args:
        dim (int): model width D; must be divisible by 4 (two axes x sin/cos).
        temperature (float): base of the frequency ladder, > 0. Defaults to 10000.0.
    """

    def __init__(self, dim: int, temperature: float = 10000.0) -> None:
        super().__init__()
        check_sincos_width(dim)
        check_positive('ape_sincos', temperature=temperature)
        self.dim = dim
        self.temperature = temperature
        self._cache = GridTableCache()

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        # one table per (grid, prefix, device, dtype): a bf16 model does not cast the float32 table every forward
        table = self._cache.get(
            pos.cache_key(x.dtype), lambda: sincos_embed(pos.coords, self.dim, self.temperature).to(x.dtype)
        )
        return x + table
