"""ComRoPE: rotary encodings with trainable commuting angle matrices (Yu et al., CVPR 2025).

R(x) = exp(sum_i A_i x_i) with skew-symmetric, pairwise commuting A_i, so q_m . k_n depends only on x_n - x_m. Each
A_i is block diagonal (b x b blocks, J = d/b per head) with block j a multiple of one generator S_j = P_j - P_j^T:
A_i[j] = W[i, j] S_j. ``comrope_ap``: W[i, j] = 1 if j = i (mod ndim); ``comrope_ld``: W = theta, learned per axis
and block. Block j of token n is exp(t_nj S_j), t = x W: RoPE's rotation for b = 2, a fixed frame around RoPE's
rotation for b = 4 (``isoclinic_frame``), ``expm`` for b = 8. Positions are ((r + 0.5) / h, (c + 0.5) / w) of the grid,
prefix tokens at ``prefix_position``. Init (vispe's; the reference draws N(0, 1)): RMS rotation rates geometric over
``rate_range`` radians per image side, like RoPE's ladder (docs/encodings/rotary.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding
from vispe.encodings.block_rotations import apply_blocks, exp_skew, isoclinic_frame, rotate_in_frame
from vispe.encodings.rotary import rotate_by_rows
from vispe.kernels.rotary import rotary_table, rotate_qk
from vispe.layout import TokenLayout
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS

BLOCK_SIZES = (2, 4, 8)


def rate_ladder(count: int, rate_range: Sequence[float]) -> torch.Tensor:
    """(count,) rates from max(rate_range) down to min(rate_range), geometrically spaced."""
    lo, hi = min(rate_range), max(rate_range)
    return hi * (lo / hi) ** (torch.arange(count, dtype=torch.float32) / max(count - 1, 1))


class ComRoPE(Encoding):
    """Shared by ``comrope_ap`` and ``comrope_ld``, which define the axis weights W (ndim, J) and block rates.

    Args:
        dim: model width D; the head dim must divide by ``block_size`` (comrope_ap: by ``block_size * ndim``).
        num_heads: heads of the attention; each head has its own generators ``P``.
        ndim: position axes (2: rows and columns).
        block_size: b: 2, 4 or 8.
        jitter: in training, add U(-0.5, 0.5) coordinate units per sample and token before normalising.
        rate_range: (lowest, highest) initial RMS rotation rate in radians per image side, both > 0.
        prefix_position: the normalised position of prefix tokens on every axis (0: unrotated; the reference: 0.5).
    """

    #: every axis owns whole blocks (AP), so the head dim must divide by block_size * ndim
    partitioned: ClassVar[bool] = False
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ('P',)
    weight_decay_note = 'decay would shrink every rotation toward the identity'

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        block_size: int = 4,
        jitter: bool = False,
        rate_range: tuple[float, float] = (0.16, 16.0),
        prefix_position: float = 0.0,
    ) -> None:
        super().__init__()
        head_dim, name = dim // num_heads, self.registry_name()
        if isinstance(prefix_position, bool) or not isinstance(prefix_position, (int, float)):
            raise ValueError(f'{name}: prefix_position is a number (0: the identity; 0.5: the image centre)')
        if not math.isfinite(prefix_position):
            raise ValueError(f'{name}: prefix_position must be finite, got {prefix_position!r}')
        if block_size not in BLOCK_SIZES:
            raise ValueError(f'{name}: block_size must be one of {BLOCK_SIZES}, got {block_size}')
        if len(rate_range) != 2 or not min(rate_range) > 0:
            raise ValueError(
                f'{name}: rate_range is (lowest, highest) initial rotation rate, two numbers > 0, got {rate_range!r}; '
                'use e.g. (0.16, 16.0)'
            )
        unit = block_size * (ndim if self.partitioned else 1)
        if head_dim % unit:
            why = f' times {ndim} axes, each owning whole blocks' if self.partitioned else ''
            raise ValueError(
                f'{name}: head dim {head_dim} (dim {dim} / {num_heads} heads) must be divisible by {unit} '
                f'(block_size {block_size}{why}); change block_size or num_heads'
            )
        self.num_heads, self.head_dim, self.ndim = num_heads, head_dim, ndim
        self.block_size, self.num_blocks = block_size, head_dim // block_size
        self.jitter, self.rate_range = jitter, tuple(rate_range)
        self.prefix_position = float(prefix_position)
        self.P = nn.Parameter(torch.empty(num_heads, self.num_blocks, block_size, block_size))
        self.build_axis_weights()
        self.reset_parameters()

    def build_axis_weights(self) -> None:
        raise NotImplementedError

    def axis_weights(self) -> torch.Tensor:  # W (ndim, J): A_i[j] = W[i, j] S_j
        raise NotImplementedError

    def block_rates(self) -> torch.Tensor:  # (J,) initial RMS rotation rates, rad per unit of normalised position
        raise NotImplementedError

    def reset_parameters(self) -> None:
        sigma = self.block_rates() / math.sqrt(2 * (self.block_size - 1))
        with torch.no_grad():
            self.P.normal_().mul_(sigma[None, :, None, None])

    def skew_generators(self) -> torch.Tensor:
        """S = P - P^T (H, J, b, b), float32."""
        p = self.P.float()
        return p - p.transpose(-1, -2)

    def generators(self) -> torch.Tensor:
        """The blocks of the angle matrices A_i: (ndim, H, J, b, b)."""
        return self.axis_weights().float()[:, None, :, None, None] * self.skew_generators()

    def normalized_coords(self, pos: Positions, batch: int | None = None) -> torch.Tensor:
        """(N, ndim), or (B, N, ndim) when jittered (B = ``batch``), float32 positions in (0, 1)."""
        coords = pos.coords.float()
        lo: torch.Tensor | float
        if pos.on_grid:
            lo = -0.5
            span = pos.span_tensor()  # rpe2d: its range L; a mixed batch: each token's image grid
        else:  # no grid (points, sampled positions): min-max per sample
            lo = coords.amin(dim=-2, keepdim=True)
            span = (coords.amax(dim=-2, keepdim=True) - lo).clamp_min(1e-6)
        if self.jitter and self.training:
            coords = coords + torch.rand(batch or 1, *coords.shape[-2:], device=coords.device) - 0.5
        return (coords - lo) / span

    def multipliers(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """t = x W (..., num_prefix + N, J), float32; prefix tokens at x = ``prefix_position`` on every axis (0 by
        default: t = 0, the identity)."""
        if num_prefix and self.prefix_position:
            x = torch.cat([x.new_full((*x.shape[:-2], num_prefix, x.shape[-1]), self.prefix_position), x], dim=-2)
            num_prefix = 0
        t = x.float() @ self.axis_weights().float()
        return F.pad(t, [0, 0, num_prefix, 0]) if num_prefix else t

    def rotation(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """Blocks of R(x) = exp(sum_i A_i x_i) for normalised x (..., N, ndim): (..., H, num_prefix + N, J, b, b)."""
        with autocast_off(x):
            return exp_skew(self.skew_generators(), self.multipliers(x, num_prefix))

    def rotate_normalized(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, num_prefix: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q, k (B, H, num_prefix + N, d) by R(x) for normalised positions x (N or B, N, ndim)."""
        with autocast_off(q):
            gen, t = self.skew_generators(), self.multipliers(x, num_prefix)
            if self.block_size == 2:  # e^(i t_j omega_j), omega = S[1, 0]: (..., H, N, d/2)
                return rotate_qk(q, k, rotary_table(t[..., None, :, :] * gen[:, None, :, 1, 0]))
            if self.block_size == 4:  # M^T D(t omega) M: two plane rotations per block in M's frame
                frame, rates = isoclinic_frame(gen)
                table = rotary_table((t[..., None, :, :, None] * rates[:, None]).flatten(-2))  # (..., H, N, d/2, 2)
                return rotate_in_frame(q, k, frame, lambda qy, ky: rotate_qk(qy, ky, table))
            rot = exp_skew(gen, t)
            return apply_blocks(q, rot), apply_blocks(k, rot)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        if pos.layout is not None and pos.key is not None and not (self.jitter and self.training):
            return self.rotate_grid_cells(q, k, pos.layout)
        x = self.normalized_coords(pos, q.shape[0])
        if pos.layout is not None:  # a mixed batch: its prefix (and padding) tokens at x = prefix_position
            mask = pos.layout.patch_mask(x.device)[..., None]
            x = x * mask if not self.prefix_position else torch.where(mask, x, self.prefix_position)
        return self.rotate_normalized(q, k, x, pos.num_prefix)

    def rotate_grid_cells(
        self, q: torch.Tensor, k: torch.Tensor, layout: TokenLayout
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch on its images' own grids: the rotations are computed once per cell of each distinct grid
        (at ((r + 0.5) / h, (c + 0.5) / w), as ``normalized_coords``) plus one row at ``prefix_position`` (the
        identity by default), and each token takes its row (``layout.table_index``; prefix and padding tokens that
        last row), not once per token of the batch."""
        coords, sizes = layout.grid_cells(q.device)
        x = torch.cat([(coords + 0.5) / sizes, coords.new_full((1, coords.shape[-1]), self.prefix_position)])
        index = layout.table_index(q.device)  # (B, T)

        def per_token(rows: torch.Tensor) -> torch.Tensor:  # (H, R, ...) -> (B, H, T, ...), token-major in memory
            return rows.movedim(1, 0)[index].movedim(1, 2)

        with autocast_off(q):
            gen, t = self.skew_generators(), self.multipliers(x)  # t (R, J)
            if self.block_size == 2:
                return rotate_by_rows(q, k, (t * gen[:, None, :, 1, 0]).movedim(1, 0), index)  # rows (R, H, J)
            if self.block_size == 4:  # as rotate_normalized, the plane rotations by rows
                frame, rates = isoclinic_frame(gen)
                rows = (t[:, None, :, None] * rates).flatten(-2)  # (R, H, d/2) angles
                return rotate_in_frame(q, k, frame, lambda qy, ky: rotate_by_rows(qy, ky, rows, index))
            rot = per_token(exp_skew(gen, t))  # (B, H, T, J, b, b)
            return apply_blocks(q, rot), apply_blocks(k, rot)


@ENCODINGS.register_module(name='comrope_ap')
class ComRoPEAP(ComRoPE):
    """ComRoPE-AP: block j rotates with axis j mod ndim only, by exp(x_(j mod ndim) (P_j - P_j^T)).

    Arguments: as `ComRoPE`.
    """

    partitioned = True
    mask: torch.Tensor  # buffer (ndim, J): block j belongs to axis j mod ndim

    def build_axis_weights(self) -> None:
        mask = torch.arange(self.num_blocks) % self.ndim == torch.arange(self.ndim)[:, None]
        self.register_buffer('mask', mask.float(), persistent=False)

    def axis_weights(self) -> torch.Tensor:
        return self.mask

    def block_rates(self) -> torch.Tensor:
        rank = torch.arange(self.num_blocks) // self.ndim  # each axis gets the whole ladder
        return rate_ladder(self.num_blocks // self.ndim, self.rate_range)[rank]


@ENCODINGS.register_module(name='comrope_ld')
class ComRoPELD(ComRoPE):
    """ComRoPE-LD: block j rotates by exp((x . theta_j) (P_j - P_j^T)), ``theta`` (ndim, J) starting as a
    random unit vector per block.

    Arguments: as `ComRoPE`.
    """

    no_weight_decay_params = ('P', 'theta')

    def build_axis_weights(self) -> None:
        self.theta = nn.Parameter(torch.empty(self.ndim, self.num_blocks))

    def axis_weights(self) -> torch.Tensor:
        return self.theta

    def block_rates(self) -> torch.Tensor:
        return rate_ladder(self.num_blocks, self.rate_range)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        with torch.no_grad():
            direction = torch.randn(self.ndim, self.num_blocks)
            self.theta.copy_(direction / direction.norm(dim=0, keepdim=True))


__all__ = ['ComRoPE', 'ComRoPEAP', 'ComRoPELD', 'rate_ladder']
