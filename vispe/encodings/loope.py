"""LOOPE (Chowdhury, Rahman and Taki 2025, "LOOPE: Learnable Optimal Patch Order in Positional Embeddings for Vision
Transformers", arXiv 2504.14386): a 1D sinusoidal absolute embedding of the patches taken in the order of a
space-filling curve, plus a learned per-patch offset of that order.

Patch p gets one scalar position X_p = X_G(p) + X_C(p): X_G(p) its index along a generalised Hilbert ("Gilbert")
curve of the grid, X_C(p) a learned context bias (per patch here; the authors' is computed from the image: ``LOOPE``
has the departures). The embedding E(X) = [sin(X w_0), ..., sin(X w_(D/2-1)),
cos(X w_0), ..., cos(X w_(D/2-1))], w_k = 1 / temperature^(2k / D), is added to the patch tokens.

The curve (``curve_cells``) is written here from its definition (the authors' ``gilbert_2d`` gives the same order on
square grids; tests/parity/test_parity_loope.py): a rectangle is cut in two halves along its major
axis when it is long, else in three parts (a half-width strip up the minor axis, the full length across, and back
down), each walked recursively so that consecutive cells always share an edge. Which cell of a grid comes where is
a Python computation on the grid's (static) size, cached per size (``curve_ranks``); a traced model whose grid is
symbolic (torch.export with dynamic H and W, an FX graph) computes the same ranks with tensor operations instead
(``traced_gilbert_ranks``), so one program serves every size.
"""

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
    """The cells (x, y) of the rectangle with corner (x, y), spanned by the axis-aligned, perpendicular vectors a
    (the major axis, walked first to last) and b, from its corner to the far end of a (when the parities allow;
    see ``curve_cells``)."""
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
    """Whether the curve of an h x w grid runs its major axis along the columns (x): along the even side when one
    side is even and the other odd (the only parity with which the walk can end on the start's side), else along
    the longer side (the columns on a tie)."""
    if (w % 2) != (h % 2):
        return w % 2 == 0
    return w >= h


def curve_cells(h: int, w: int) -> list[tuple[int, int]]:
    """The (row, col) cells of an h x w grid in the order of its Gilbert curve: every cell once, each next to the
    one before (a Hamiltonian path of the grid with unit steps), from (0, 0).

    Major axis by ``along_columns``. Červený's gilbert2d takes the longer side, and on an odd x even rectangle
    makes one diagonal step; taking the even side there keeps every step a unit one. The LOOPE authors'
    ``gilbert_2d`` (used on square grids) always runs along the columns: wherever this does too (every square), the
    two give the same order, edges halved by floor division as both halve them.
    """
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
    """``order_ranks``, cached per (order, h, w) in eager mode; under torch.compile computed in the trace (a constant
    of the graph: the grid's size is static there), so that dynamo never guards on the cache."""
    if torch.compiler.is_compiling():
        return order_ranks(order, h, w)
    key = (order, h, w)
    ranks = _RANKS.get(key)
    if ranks is None:
        ranks = _RANKS[key] = order_ranks(order, h, w)
    return ranks


def traced_gilbert_ranks(sizes: torch.Tensor, cells: torch.Tensor, steps: int = TRACED_STEPS) -> torch.Tensor:
    """``order_ranks('gilbert', h, w)`` as tensor operations, for grids whose size is symbolic: ``sizes`` the (2,)
    (h, w), ``cells`` the (N, 2) (row, col) cells, both integer-valued -> (N,) long ranks.

    Each cell follows the recursion of ``_walk`` down to its own line: per step, the rectangle holding it is cut as
    ``_walk`` cuts it, the cell keeps the part it lies in, and the cells of the parts walked before it are added to
    its offset. A line is left as it is; ``steps`` must cover the deepest cut (2 (bits of the longer side - 1)).
    """
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
    """LOOPE: 1D sine features of each patch's index along a Gilbert curve, plus a learned per-patch offset.

    Patch p of the grid gets the scalar X_p = start + s X_G(p) + X_C(p) and the tokens receive E(X_p) =
    [sin(X_p w) | cos(X_p w)], w_k = 1 / temperature^(2k / D), k < D/2 (the frequencies of the classic 1D
    transformer sinusoid; fixed, not learned). The authors' code (AbtahiMajeed144/LOOPE) interleaves the channels
    (sin at even ones, cos at odd ones): a fixed permutation of the model's channels. X_G is the patch's index (0 to
    N - 1) along the grid's Gilbert curve (``order='gilbert'``; on square grids the authors' ``gilbert_2d``, cell
    for cell) or in row-major order (``order='raster'``). ``start`` is the first patch's index: 0 by default
    (prefix tokens carry no position, so the patches begin the sequence), 1 in the authors' code (their index 0 is
    the cls token's). ``order='raster', context=False`` is the plain 1D sine baseline of the paper's tables (a 1D
    sinusoid of the raster index), which vispe had not had. At init (X_C = 0) LOOPE is that 1D sinusoid along the
    curve. Prefix tokens (cls, registers) carry no position and get nothing, as with ape_sincos.

    The context bias X_C (``context=True``): one learned scalar per patch of the training grid (``grid_size``),
    ``context_bias`` (h, w), zero at init: a learned per-patch shift of the order, the same for every image. A
    departure: the authors' X_C (``ArtPE``) is computed from each image, 2 sigmoid(f(image, coordinates)) - 1 in
    (-1, 1), f a small CNN over the pixels and two coordinate channels with a linear map to the patches; vispe's
    encodings see the tokens, not the pixels, so there is no option for it. Given the same X_C the tables agree.

    Resolution: at another grid the curve is that grid's own (its ranks are recomputed; an N_train-cell curve is not
    resampled), and X_C is resized bilinearly to the grid (timm's ``resample_abs_pos_embed``, antialiased when
    shrinking). ``strategy``: ``interpolate`` (default) scales the index by s = N_train / N, so the positions span
    the trained range start + [0, N_train) (a Hilbert-type curve is self-similar: the same fraction of the curve
    lands in about the same place of the image at any size); ``extend`` keeps the raw index (s = 1): a larger grid
    reaches positions never trained, and is what the authors' construction gives at that grid. At the training grid
    both are the encoding itself.

    Positions from samplers (``rpe2d``, ``fuzzy``) are not read: like ape_learned's table, LOOPE is a function of the
    patch grid, so a sampler leaves it unchanged. A mixed-size batch gets each image's table for its own grid.

    Cost: at a grid seen before, (N,) positions from a cached rank table plus X_C, then sin and cos of an (N, D/2)
    product per forward (per block with LaPE): the same order as ape_sincos. The curve itself is computed once per
    grid size in Python (cached; traced as a constant under torch.compile). CPU: 1.012x ape_learned's forward+backward
    time (vit_small_patch16_224, 224 px, batch 8, one thread, float32: median 2553 ms against 2522; ape_sincos
    1.017x in the same run; ``tools/benchmark.py --threads 1 --repeats 6``), within the 1.05 target and within
    run-to-run noise. GPU: not measured. A graph traced with a symbolic size (torch.export with dynamic H and W, FX)
    computes the ranks every forward instead: ``TRACED_STEPS`` rounds of elementwise ops on (N,) integers.

    Weight decay: none on ``context_bias``. It is a position, not a weight: decay would pull every patch's offset
    toward 0, i.e. toward the fixed curve order, a prior the paper does not state (its X_C is a learned correction of
    the order), and of a size that depends on the grid's length rather than on the model.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE), in which the curve's ranks
    are the tensor operations of ``traced_gilbert_ranks`` (a traced grid is symbolic); its Python code does not
    script: its hook takes ``Positions``, and the ranks come from a recursive generator and Python dict caches.

    Args:
        dim: model width D; must be even (sin and cos halves).
        grid_size: (h, w), the training grid in patches: the shape of X_C and N_train of ``interpolate`` (the backbone
            supplies its patch grid).
        order: 'gilbert' (the patches in the order of the grid's Gilbert curve) or 'raster' (row-major).
        context: learn the per-patch context bias X_C (init 0); False: the fixed order alone.
        temperature: base of the frequency ladder, > 0.
        lape: LaPE: the table enters each block's attention input through a LayerNorm of its own per block, instead of
            being added to the tokens once.
        depth: the number of blocks, one LayerNorm each with ``lape`` (the backbone supplies it).
        start: the index of the curve's first patch, >= 0: 1 gives the authors' table.
        lape_progressive: with ``lape``, block l's LayerNorm reads block l-1's normalised table, as the authors' code
            (``LayerAdaptive``).
    """

    strategies = ('interpolate', 'extend')
    no_weight_decay_params = ('context_bias',)

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
        """(N,) float32 ``start`` + s X_G of an h x w ``grid``: the index along the order, scaled by the strategy."""
        return self.scaled_index(grid, device) + self.start

    def scaled_index(self, grid: Sequence[int], device: torch.device) -> torch.Tensor:
        """(N,) float32 s X_G of an h x w ``grid``: the index along the order, scaled by the strategy."""
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
        """(N,) X_C of ``grid`` in float32: the learned bias, resized bilinearly from the training grid."""
        table = self.context_bias.reshape(1, -1, 1).float()
        return grid_table(table, list(grid), list(self.grid_size), 'bilinear').reshape(-1)

    def table_of(
        self, grid: Sequence[int], device: torch.device, dtype: torch.dtype, key: tuple | None = None
    ) -> torch.Tensor:
        """The (N, D) table of an h x w ``grid`` in ``dtype``; ``key`` (positions' cache key) caches what depends on
        the grid alone (the scaled index; without X_C, the whole table)."""
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
        """A mixed batch: (B, T, D), each patch token its own image grid's entry, zero on prefix and padding: the
        tables of the distinct grids one after another, gathered at offset + cell."""
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
