"""Rotary position embeddings for vision: axial and mixed (Heo et al., "Rotary Position Embedding for
Vision Transformer", ECCV 2024).

Channel layout follows timm's naver-ai RoPE-ViT models, so their weights load unchanged: pairs are
interleaved (channels 2j, 2j+1 form pair j) and, for images, the first half of the pairs rotates with the
column (x) and the second half with the row (y). A pair is rotated as one complex multiplication,
(x_2j + i x_2j+1) * e^(i angle), which is the same maths as timm's cos/sin form at about half the time and
memory. Prefix tokens are left unrotated (e^(i 0) rows in the table, which avoids slicing q and k). Angles
and the rotation are computed in float32 even under autocast. Hook: rotate, q and k (B, H, N_total, d) -> same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers.pos_embed_sincos import init_random_2d_freqs
from torch import nn

from vispe.encodings.base import Encoding, GridTableCache
from vispe.positions import Positions
from vispe.registry import ENCODINGS


def axial_frequencies(head_dim: int, ndim: int, theta: float) -> torch.Tensor:
    """w_k = 1 / theta^(k / (d / (2 ndim))), k < d / (2 ndim): for 2D, 1 / theta^(4k/d)."""
    if head_dim % (2 * ndim):
        raise ValueError(
            f'rotary encodings need a head dim divisible by {2 * ndim} for {ndim}D positions, got {head_dim}'
        )
    per_axis = head_dim // (2 * ndim)
    return 1.0 / theta ** (torch.arange(per_axis, dtype=torch.float32) / per_axis)


def rotary_table(angles: torch.Tensor, num_prefix: int) -> torch.Tensor:
    """Complex table e^(i angle) (..., num_prefix + N, d/2) from angles (..., N, d/2), complex64.

    Prefix rows are 1: those tokens pass through unrotated.
    """
    table = torch.polar(torch.ones_like(angles), angles.float())
    return F.pad(table, [0, 0, num_prefix, 0], value=1.0) if num_prefix else table


def rotate_pairs(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved channel pairs of x (B, H, N, d) by a complex table broadcastable to (B, H, N, d/2)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * table).flatten(-2).type_as(x)


@ENCODINGS.register_module(name='rope_axial')
class RoPEAxial(Encoding):
    """Axial 2D RoPE: pair k of axis a rotates by coord_a * w_k, w_k = 1/theta^(4k/d) (theta = 100).

    No parameters; the (cos, sin) tables are cached per grid, prefix count and device.
    """

    def __init__(self, dim: int, num_heads: int, ndim: int = 2, theta: float = 100.0) -> None:
        super().__init__()
        self.head_dim = dim // num_heads
        self.ndim = ndim
        self.theta = theta
        self.register_buffer('freqs', axial_frequencies(self.head_dim, ndim, theta), persistent=False)
        self._cache = GridTableCache()

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., N, ndim) -> (..., N, d/2). The last axis comes first (x before y for (row, col))."""
        per_axis = [coords[..., a, None].float() * self.freqs for a in reversed(range(self.ndim))]
        return torch.cat(per_axis, dim=-1)

    def rotate(self, q, k, pos: Positions):
        table = self._cache.get(pos.cache_key(), lambda: rotary_table(self.angles(pos.coords), pos.num_prefix))
        if table.dim() == 3:  # per-sample positions: (B, N, d/2) -> (B, 1, N, d/2), shared by the heads
            table = table[:, None]
        return rotate_pairs(q, table), rotate_pairs(k, table)


@ENCODINGS.register_module(name='rope_mixed')
class RoPEMixed(Encoding):
    """Mixed 2D RoPE with learnable frequencies, one set per attention layer and head.

    The angle of pair j in head h is f_x[h, j] * col + f_y[h, j] * row. Init (theta = 10): magnitudes
    1/theta^(4k/d); a random angle a per head; the first d/4 pairs point along (cos a, sin a), the last d/4
    along a + pi/2. ``freqs`` (ndim, H, d/2) is excluded from weight decay.
    """

    def __init__(self, dim: int, num_heads: int, ndim: int = 2, theta: float = 10.0) -> None:
        super().__init__()
        if ndim != 2:
            raise ValueError(f'rope_mixed is defined here for 2D positions, got ndim={ndim}')
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.theta = theta
        axial_frequencies(self.head_dim, ndim, theta)  # validates the head dim
        self.freqs = nn.Parameter(torch.empty(2, num_heads, self.head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.freqs.copy_(init_random_2d_freqs(self.head_dim, 1, self.num_heads, temperature=self.theta)[:, 0])

    def no_weight_decay(self):
        return {'freqs'}

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., N, 2) (row, col) -> (..., H, N, d/2); float32 matmul-free so autocast cannot downcast it."""
        freqs = self.freqs.float()
        col, row = coords[..., 1].float(), coords[..., 0].float()
        return col[..., None, :, None] * freqs[0, :, None] + row[..., None, :, None] * freqs[1, :, None]

    def rotate(self, q, k, pos: Positions):
        table = rotary_table(self.angles(pos.coords), pos.num_prefix)  # (..., H, N, d/2)
        return rotate_pairs(q, table), rotate_pairs(k, table)


__all__ = ['RoPEAxial', 'RoPEMixed', 'axial_frequencies', 'rotary_table', 'rotate_pairs']
