"""LOOPE (Chowdhury, Rahman and Taki 2025, arXiv 2504.14386): 1D sinusoids of each patch's index along a
generalised Hilbert ("Gilbert") curve of the grid, plus a learned per-patch offset."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn

from vispe.encodings.absolute import grid_table
from vispe.encodings.base import GridTableCache, check_positive
from vispe.encodings.lape import LayerAdaptive
from vispe.encodings.rotary import train_grid_from
from vispe.positions import Positions, autocast_off, grid_coords, is_symbolic, sizes_tensor
from vispe.registry import ENCODINGS

# FX leaves from this module too (torch.fx.wrap patches the calling module's global): an FX graph calls them at run
# time with the concrete sizes
torch.fx.wrap('grid_table')
torch.fx.wrap('sizes_tensor')

#: patch orders: along the Gilbert curve, or row-major (with ``context=False`` the plain 1D sine baseline)
ORDERS = ('gilbert', 'raster')
#: refinement steps of ``traced_gilbert_ranks``; a grid needs at most 2 (bits of its longer side - 1) of them, so
#: these cover sides up to 4096 tokens (``curve_ranks`` has no such bound: it is what every concrete size uses)
TRACED_STEPS = 24
#: ranks per (order, h, w), filled outside torch.compile (under it the ranks are traced as constants instead)
_RANKS: dict[tuple[str, int, int], tuple[int, ...]] = {}


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def _walk(x: int, y: int, ax: int, ay: int, bx: int, by: int) -> Iterator[tuple[int, int]]:
    """The cells of the rectangle at corner (x, y) spanned by a (the major axis, walked first to last) and b."""
    length, width = abs(ax + ay), abs(bx + by)
    dax, day, dbx, dby = _sign(ax), _sign(ay), _sign(bx), _sign(by)
    if width == 1 or length == 1:  # a line: walk it
        sx, sy, steps = (dax, day, length) if width == 1 else (dbx, dby, width)
        for i in range(steps):
            yield x + i * sx, y + i * sy
        return
    # halves by floor division of the signed edges (gilbert2d's, the LOOPE authors'): a negative odd edge halves
    # away from zero, which decides on which side of the middle the curve turns
    a2x, a2y, b2x, b2y = ax // 2, ay // 2, bx // 2, by // 2
    if 2 * length > 3 * width:  # long: two halves along a, the first of even length where it can be
        if abs(a2x + a2y) % 2 and length > 2:
            a2x, a2y = a2x + dax, a2y + day
        yield from _walk(x, y, a2x, a2y, bx, by)
        yield from _walk(x + a2x, y + a2y, ax - a2x, ay - a2y, bx, by)
        return
    if abs(b2x + b2y) % 2 and width > 2:  # an even strip, so that the walk up it ends beside the next part
        b2x, b2y = b2x + dbx, b2y + dby
    yield from _walk(x, y, b2x, b2y, a2x, a2y)  # up the strip, over half of a
    yield from _walk(x + b2x, y + b2y, ax, ay, bx - b2x, by - b2y)  # the rest of b, across all of a
    # back down the strip over the other half of a, to the far end of a
    yield from _walk(x + (ax - dax) + (b2x - dbx), y + (ay - day) + (b2y - dby), -b2x, -b2y, a2x - ax, a2y - ay)


def along_columns(h: int, w: int) -> bool:
    """Whether the curve's major axis is the columns: the even side when one side is odd, else the longer one."""
    if (w % 2) != (h % 2):
        return w % 2 == 0
    return w >= h


def curve_cells(h: int, w: int) -> list[tuple[int, int]]:
    """The (row, col) cells of an h x w grid along its Gilbert curve from (0, 0), each step to an edge neighbour (on
    squares the LOOPE authors' ``gilbert_2d``; odd x even rectangles run along the even side, with no diagonal step)."""
    if h < 1 or w < 1:
        raise ValueError(f'a Gilbert curve needs a grid of at least 1 x 1 cells, got {h} x {w}')
    walk = _walk(0, 0, w, 0, 0, h) if along_columns(h, w) else _walk(0, 0, 0, h, w, 0)
    return [(y, x) for x, y in walk]


def order_ranks(order: str, h: int, w: int) -> tuple[int, ...]:
    """Each row-major cell's index along ``order`` ('gilbert' or 'raster') on an h x w grid."""
    if order == 'raster':
        return tuple(range(h * w))
    ranks = [0] * (h * w)
    for i, (r, c) in enumerate(curve_cells(h, w)):
        ranks[r * w + c] = i
    return tuple(ranks)


def curve_ranks(order: str, h: int, w: int) -> tuple[int, ...]:
    if torch.compiler.is_compiling():
        return order_ranks(order, h, w)
    key = (order, h, w)
    ranks = _RANKS.get(key)
    if ranks is None:
        ranks = _RANKS[key] = order_ranks(order, h, w)
    return ranks


def traced_gilbert_ranks(sizes: torch.Tensor, cells: torch.Tensor, steps: int = TRACED_STEPS) -> torch.Tensor:
    """``order_ranks('gilbert', h, w)`` as tensor operations for symbolic grids (torch.export, FX): (2,) ``sizes``,
    (N, 2) ``cells`` -> (N,) long; ``steps`` must cover 2 (bits of the longer side - 1) cuts."""
    h, w = sizes[0].long(), sizes[1].long()
    py, px = cells[:, 0].long(), cells[:, 1].long()
    cols = torch.where((w % 2) != (h % 2), w % 2 == 0, w >= h)
    zero = torch.zeros_like(px)
    ax, ay = torch.where(cols, w, 0) + zero, torch.where(cols, 0, h) + zero
    bx, by = torch.where(cols, 0, w) + zero, torch.where(cols, h, 0) + zero
    x, y, offset = zero, zero, zero
    for _ in range(steps):
        length, width = (ax + ay).abs(), (bx + by).abs()
        dax, day, dbx, dby = ax.sign(), ay.sign(), bx.sign(), by.sign()
        u = (px - x) * dax + (py - y) * day  # the cell's distance along a, and along b, from the corner
        v = (px - x) * dbx + (py - y) * dby
        active = (length > 1) & (width > 1)
        long = 2 * length > 3 * width
        floor_a = torch.div(ax + ay, 2, rounding_mode='floor').abs()  # |a // 2|, floor of the signed edge
        floor_b = torch.div(bx + by, 2, rounding_mode='floor').abs()
        half_a = floor_a + (long & (floor_a % 2 == 1) & (length > 2)).long()
        half_b = floor_b + (~long & (floor_b % 2 == 1) & (width > 2)).long()
        a2x, a2y, b2x, b2y = dax * half_a, day * half_a, dbx * half_b, dby * half_b
        # long: the first half (u < half_a) or the second
        second = u >= half_a
        long_rect = (
            torch.where(second, x + a2x, x),
            torch.where(second, y + a2y, y),
            torch.where(second, ax - a2x, a2x),
            torch.where(second, ay - a2y, a2y),
            bx,
            by,
            offset + second.long() * half_a * width,
        )
        # standard: up the strip (v < half_b, u < half_a), across (v >= half_b), or back down the strip
        across, down = v >= half_b, (v < half_b) & (u >= half_a)
        up_area = half_a * half_b
        std_rect = (
            torch.where(across, x + b2x, torch.where(down, x + (ax - dax) + (b2x - dbx), x)),
            torch.where(across, y + b2y, torch.where(down, y + (ay - day) + (b2y - dby), y)),
            torch.where(across, ax, torch.where(down, -b2x, b2x)),
            torch.where(across, ay, torch.where(down, -b2y, b2y)),
            torch.where(across, bx - b2x, torch.where(down, a2x - ax, a2x)),
            torch.where(across, by - b2y, torch.where(down, a2y - ay, a2y)),
            offset + across.long() * up_area + down.long() * (up_area + length * (width - half_b)),
        )
        new = [torch.where(long, lv, sv) for lv, sv in zip(long_rect, std_rect)]
        x, y, ax, ay, bx, by, offset = (
            torch.where(active, n, old) for n, old in zip(new, (x, y, ax, ay, bx, by, offset))
        )
    # on its line, a cell's index is its distance from the line's start (one of u, v is 0)
    u = (px - x) * ax.sign() + (py - y) * ay.sign()
    v = (px - x) * bx.sign() + (py - y) * by.sign()
    return offset + u + v


def sine_table(positions: torch.Tensor, dim: int, temperature: float) -> torch.Tensor:
    """(..., N) scalar positions -> (..., N, dim) float32 [sin(X w) | cos(X w)], w_k = 1 / temperature^(2k / dim)."""
    with autocast_off(positions):
        k = torch.arange(dim // 2, device=positions.device, dtype=torch.float32)
        omega = 1.0 / temperature ** (2.0 * k / dim)
        angles = positions.float()[..., None] * omega
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


@ENCODINGS.register_module(name='loope')
class LOOPE(LayerAdaptive):
    """LOOPE: E(X_p) = [sin(X_p w) | cos(X_p w)], w_k = 1 / temperature^(2k / D), at each patch p, with
    X_p = start + s X_G(p) + X_C(p): X_G the index along ``order``, X_C a learned scalar per patch of the training grid
    (zero at init, resized bilinearly), s = N_train / N (``interpolate``) or 1 (``extend``). Departures: patches count
    from 0, the authors' from 1 (``start=1``); their X_C comes from the image through a small CNN, which an encoding
    cannot see; their channels interleave sin and cos.

    Args:
        dim: model width (even).
        grid_size: (h, w) training grid: the shape of X_C and N_train.
        order: 'gilbert' or 'raster' (with ``context=False``, the paper's 1D sine baseline).
        context: learn X_C.
        temperature: base of the frequency ladder.
        lape: LaPE (``LayerAdaptive``).
        depth: the number of blocks (LaPE's norms).
        start: the index of the first patch.
        lape_progressive: LaPE's chained norms (``LayerAdaptive``).
    """

    strategies = ('interpolate', 'extend')
    no_weight_decay_params = ('context_bias',)
    weight_decay_note = 'a position, not a weight'

    def __init__(
        self,
        dim: int,
        grid_size: Sequence[int] = (14, 14),
        order: str = 'gilbert',
        context: bool = True,
        temperature: float = 10000.0,
        lape: bool = False,
        depth: int | None = None,
        start: int = 0,
        lape_progressive: bool = False,
    ) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f'loope needs an even model width (sin and cos halves), got {dim}')
        if order not in ORDERS:
            raise ValueError(f'loope: order must be one of {list(ORDERS)}, got order={order!r}')
        check_positive('loope', temperature=temperature)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f'loope: start is the index of the first patch on the curve, an int >= 0, got {start!r}')
        self.start = start
        grid = train_grid_from(grid_size, 2)
        assert grid is not None
        self.grid_size: tuple[int, int] = (grid[0], grid[1])
        self.dim = dim
        self.order = order
        self.temperature = float(temperature)
        self.context = bool(context)
        if self.context:
            self.context_bias = nn.Parameter(torch.zeros(self.grid_size))
        self._cache = GridTableCache()
        self.init_lape(lape, dim, depth, lape_progressive)

    def index_positions(self, grid: Sequence[int], device: torch.device) -> torch.Tensor:
        return self.scaled_index(grid, device) + self.start

    def scaled_index(self, grid: Sequence[int], device: torch.device) -> torch.Tensor:
        """(N,) float32 s X_G of ``grid`` (``index_positions`` adds ``start``)."""
        h, w = grid
        if is_symbolic(h, w):  # a traced size: the ranks as tensor operations, the scale as a tensor
            sizes = sizes_tensor([h, w], device)
            if self.order == 'raster':
                index = torch.arange(h * w, device=device).float()
            else:
                index = traced_gilbert_ranks(sizes, grid_coords(h, w, device)).float()
            if self.strategy == 'extend':
                return index
            return index * (self.grid_size[0] * self.grid_size[1] / sizes.prod())
        index = torch.tensor(curve_ranks(self.order, int(h), int(w)), dtype=torch.float32, device=device)
        if self.strategy == 'extend' or (h, w) == self.grid_size:
            return index
        return index * (self.grid_size[0] * self.grid_size[1] / (h * w))

    def context_positions(self, grid: Sequence[int]) -> torch.Tensor:
        """(N,) float32 X_C of ``grid``."""
        table = self.context_bias.reshape(1, -1, 1).float()
        return grid_table(table, list(grid), list(self.grid_size), 'bilinear').reshape(-1)

    def table_of(
        self, grid: Sequence[int], device: torch.device, dtype: torch.dtype, key: tuple | None = None
    ) -> torch.Tensor:
        """The (N, D) table of ``grid``; what depends on the grid alone is cached under ``key``."""
        strategy = self.strategy
        if not self.context:
            return self._cache.get(
                None if key is None else (key, strategy, dtype),
                lambda: sine_table(self.index_positions(grid, device), self.dim, self.temperature).to(dtype),
            )
        index = self._cache.get(None if key is None else (key, strategy), lambda: self.index_positions(grid, device))
        return sine_table(index + self.context_positions(grid), self.dim, self.temperature).to(dtype)

    def position_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        device = pos.coords.device
        if pos.layout is not None:
            return self.layout_table(pos, dtype)
        if pos.grid is None:
            raise ValueError('loope orders the patches of a grid, but these positions have no grid')
        # the table is a function of the grid alone (sampled coordinates are not read), so the grid names it
        key = None if is_symbolic(*pos.grid) else (tuple(pos.grid), device)
        return self.table_of(pos.grid, device, dtype, key)

    def layout_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        """A mixed batch: (B, T, D), each patch its own image's entry, zero on prefix and padding tokens."""
        layout = pos.layout
        assert layout is not None
        device = pos.coords.device
        tables = [self.table_of(grid, device, dtype, (grid, device)) for grid in layout.distinct_grids]
        stacked = torch.cat([*tables, tables[0].new_zeros(1, tables[0].shape[-1])])  # the last row: padding
        return stacked[layout.table_index(device)]

    def extra_repr(self) -> str:
        return (
            f'order={self.order!r}, context={self.context}, grid_size={self.grid_size}, '
            f'temperature={self.temperature}, start={self.start}, lape={self.lape}'
        )


__all__ = ['LOOPE', 'curve_cells', 'curve_ranks', 'order_ranks', 'sine_table', 'traced_gilbert_ranks']
