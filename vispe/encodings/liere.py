"""LieRE: Lie rotational positional encodings (Ostmeier et al., ICML 2025; github.com/StanfordMIMI/LieRE).

Token n is rotated by R(x_n) = exp(sum_a x_na A_a), learned skew generators per axis, block diagonal (J = d / b
blocks), per head and layer; they need not commute, so q . k depends on both positions (relative along one axis).
``generators`` hold the blocks' strict upper triangles (the reference's ``raw[a, layer, h * J + j][triu]``).
Positions as the reference: x = r (n / g) / (n - 1) on a grid, min-max per sample off one, 0 for prefix tokens.
Departure: the reference ends up with layer 0's generators in every layer; vispe gives each layer its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings import block_rotations
from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.rotary_core import rotate_by_angle_rows, train_grid_from
from vispe.kernels.rotary import cos_sin_table, rotate_qk
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='liere')
class LieRE(Encoding):
    """LieRE: q and k of token n rotated by exp(sum_a x_na A_a) (module doc).

    Args:
        dim: model width D; the head dim ``dim // num_heads`` must divide by ``block_size``.
        num_heads: heads of the attention; each head has its own generators.
        ndim: position axes: 2 for images, 3 for volumes or points.
        block_size: b, at least 2.
        grid_size: the training grid (the backbone supplies it): positions span [0, 1] across it and n / g at other
            sizes.
        init_scale: generator entries start U(0, init_scale), the reference's 2 pi.
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    needs_grid = False  # reads coordinates alone: points as well as grids
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ('generators',)
    weight_decay_note = 'the reference trains with plain Adam, no decay'
    upper: torch.Tensor  # buffer: flat indices i * b + j of the strict upper triangle, row-major
    train_size: torch.Tensor  # buffer (ndim,): the training grid, or empty when unknown

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        block_size: int = 8,
        grid_size: Sequence[int] | None = None,
        init_scale: float = 2 * math.pi,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads, 'liere')
        head_dim = dim // num_heads
        if block_size < 2 or head_dim % block_size:
            raise ValueError(
                f'liere: block_size must be >= 2 and divide the head dim {head_dim} (dim {dim} / {num_heads} heads), '
                f'got {block_size}; change block_size or num_heads'
            )
        if not init_scale > 0:
            raise ValueError(f'liere: init_scale must be > 0, got {init_scale}')
        self.num_heads, self.head_dim, self.ndim = num_heads, head_dim, ndim
        self.block_size, self.num_blocks, self.init_scale = block_size, head_dim // block_size, init_scale
        self.train_grid = train_grid_from(grid_size or None, ndim)  # () from point backbones: no grid
        rows, cols = torch.triu_indices(block_size, block_size, 1)
        self.register_buffer('upper', rows * block_size + cols, persistent=False)
        train = torch.tensor(self.train_grid if self.train_grid else [], dtype=torch.float32)
        self.register_buffer('train_size', train, persistent=False)
        pairs = block_size * (block_size - 1) // 2
        self.generators = nn.Parameter(torch.empty(ndim, num_heads, self.num_blocks, pairs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.generators.uniform_(0.0, self.init_scale)

    def skew_generators(self) -> torch.Tensor:
        """The blocks of A_a: (ndim, H, J, b, b) float32, A = U - U^T with U strictly upper triangular."""
        w, b = self.generators.float(), self.block_size
        shape = (self.ndim, self.num_heads, self.num_blocks, b * b)  # constants, not w.shape: FX traces w as a Proxy
        upper = w.new_zeros(shape).index_copy(-1, self.upper, w).unflatten(-1, (b, b))
        return upper - upper.transpose(-1, -2)

    def scale_grid(self, coords: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
        """Grid indices (..., ndim) on axes of ``span`` tokens -> r (n / g) / (n - 1) (module doc, Positions)."""
        ratio = span / self.train_size if self.train_grid is not None else torch.ones_like(span)
        return coords * ratio / (span - 1).clamp_min(1.0)

    def normalized_coords(self, pos: Positions) -> torch.Tensor:
        """(N, ndim) or (B, N, ndim) float32 positions (module doc, Positions)."""
        coords = pos.coords.float()
        if pos.on_grid:
            return self.scale_grid(coords, pos.span_tensor())
        lo = coords.amin(dim=-2, keepdim=True)  # no grid: min-max per sample and axis
        return (coords - lo) / (coords.amax(dim=-2, keepdim=True) - lo).clamp_min(1e-6)

    def angle_matrices(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """sum_a x_a A_a for positions x (..., N, ndim): (..., H, num_prefix + N, J, b, b); prefix rows 0."""
        x = F.pad(x.float(), [0, 0, num_prefix, 0]) if num_prefix else x.float()
        gen = self.skew_generators()  # (ndim, H, J, b, b)
        out = x @ gen.flatten(1)  # (..., N, H J b b)
        # contiguous: compiled matrix_exp on the moved (strided) view fails in a view of its decomposition
        return (
            out.unflatten(-1, (self.num_heads, self.num_blocks, self.block_size, self.block_size))
            .movedim(-5, -4)
            .contiguous()
        )

    def rotation(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """Blocks of R(x) = exp(sum_a x_a A_a): (..., H, num_prefix + N, J, b, b) float32; b = 4 in closed form
        (``exp_so4``), other sizes by ``expm``."""
        with autocast_off(x):
            if self.block_size == 4:
                return block_rotations.exp_so4(self.angle_matrices(x, num_prefix))
            # through the module: expm is an FX leaf (torch.fx.wrap patches block_rotations' global during tracing)
            return block_rotations.expm(self.angle_matrices(x, num_prefix))

    def angles(self, x: torch.Tensor) -> torch.Tensor:
        """b = 2: the rotation angle sum_a x_a A_a[1, 0] per block, (..., H, N, J) (A[1, 0] = -U[0, 1])."""
        return (
            (x.float() @ -self.generators.float()[..., 0].flatten(1))
            .unflatten(-1, (self.num_heads, -1))
            .movedim(-3, -2)
        )

    def apply_rotation(self, x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        """x (B, H, N, d) with block j of token n multiplied by rot[b, h, n, j], rot (B or 1, H, N, J, b, b) (as
        ``apply_blocks``, with the block shape from the module: under FX ``rot`` leaves the ``expm`` leaf without
        a known shape)."""
        blocks = x.float().unflatten(-1, (self.num_blocks, self.block_size))  # (B, H, N, J, b)
        return torch.einsum('xhnjab,xhnjb->xhnja', rot, blocks).flatten(-2).type_as(x)

    def rotate_normalized(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, num_prefix: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k (B, H, num_prefix + N, d) rotated by R(x) for positions x (N or B, N, ndim)."""
        with autocast_off(q):
            if self.block_size == 2:
                return rotate_qk(q, k, cos_sin_table(self.angles(x), num_prefix))
            # positions shared by the batch or per sample: (1 or B, N, ndim), so the table has a batch axis that
            # broadcasts (its rank then does not depend on x's, which FX cannot read)
            rot = self.rotation(x.reshape(-1, x.shape[-2], self.ndim), num_prefix)  # (1 or B, H, N, J, b, b)
            return self.apply_rotation(q, rot), self.apply_rotation(k, rot)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        layout = pos.layout
        if layout is not None and pos.on_grid_cells:  # a mixed batch: one table row per distinct grid cell
            coords, sizes = layout.grid_cells(q.device)
            x = torch.cat([self.scale_grid(coords, sizes), coords.new_zeros(1, self.ndim)])  # (R, ndim)
            index = layout.table_index(q.device)  # (B, T): prefix and padding tokens on the last row, x = 0
            with autocast_off(q):
                if self.block_size == 2:
                    return rotate_by_angle_rows(q, k, self.angles(x).movedim(0, 1), index)  # rows (R, H, J)
                rot = self.rotation(x).movedim(1, 0)[index].movedim(1, 2)  # (B, H, T, J, b, b)
                return self.apply_rotation(q, rot), self.apply_rotation(k, rot)
        x = self.normalized_coords(pos)
        if layout is not None:  # a mixed batch without a key: prefix and padding tokens at x = 0, the identity
            x = x * layout.patch_mask(x.device)[..., None]
        return self.rotate_normalized(q, k, x, pos.num_prefix)


__all__ = ['LieRE']
