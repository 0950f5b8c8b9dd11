"""ComRoPE: rotary encodings with trainable commuting angle matrices (Yu et al., "ComRoPE: Scalable and Robust
Rotary Position Embedding Parameterized by Trainable Commuting Angle Matrices", CVPR 2025).

R(x) = exp(sum_i A_i x_i) for normalised positions x, with skew-symmetric, pairwise commuting A_i, so
R(x)^T R(y) = R(y - x): q_m . k_n depends only on x_n - x_m. Each A_i is block diagonal with b x b blocks
(b = ``block_size``, J = d/b blocks per head), block j being a multiple of one generator S_j = P_j - P_j^T per
head, A_i[j] = W[i, j] S_j, which is why they commute. ``comrope_ap`` (axis-partitioned): W[i, j] = 1 if
j = i (mod ndim), else 0. ``comrope_ld`` (linearly dependent): W = theta, learned per axis and block (shared by
the heads, as in the reference code).

Block j of token n is thus exp(t_nj S_j), t = x W (N, J), applied to q viewed as (B, H, N, J, b) with tables
(H, N, J, ...) computed once per forward and shared by the batch, never as the reference's dense d x d matrix
per token. b = 2: a rotation by t S[1, 0], RoPE's complex multiplication. b = 4: so(4) splits into commuting
left and right quaternion multiplications, exp(t S) x = exp(t a) x exp(t b), and turning both axes onto i makes
it M^T D(t omega) M (``isoclinic_frame``): a fixed orthogonal frame M per head and block, and two plane rotations at
rates omega, so only the angles t omega depend on the token. The frames are one (d x d) block-diagonal matmul per
head before and after RoPE's complex multiplication; in a mixed batch the angles go by rows (``rotate_by_rows``,
its hand-written backward) where per-token quaternion products would cost 1.5x the fixed batch's rotation.
b = 8: ``expm`` on (H, N, J, 8, 8) and a batched matmul, about 8x slower than b = 4. Angles, frames and rotations
are float32 with autocast off; b = 4 applies its frames in q's dtype (``transform_heads``: frames rounded once, the
same for every token, so q . k stays relative) and rotates with the fused rotary kernel. Prefix tokens get t = 0 (the
identity, bit for bit) by default, the position x = 0; ``prefix_position=0.5`` puts them at the image centre
x = (0.5, 0.5) instead, as the reference code does with its cls token (its ``cls_position``, 0.5 by default).

Cost: what depends on positions and parameters (t, the frames, the angle table) once per forward pass and layer,
shared by the batch (per sample only with ``jitter``). b = 4 on CPU: 1.13x ape_learned (ViT-S/16 224, batch 8,
float32; docs). On GPU: two frame GEMMs and two rotation passes over q and k plus two elementwise passes (the
x + M^T (rotate(y) - y) form); not yet measured on a GPU in this form (3.65x before: float32 frames with casts).

Positions: ((r + 0.5) / h, (c + 0.5) / w) from ``pos.span`` (the grid, or rpe2d's enlarged range); without a
grid, min-max per sample and axis to [0, 1]. ``jitter=True``: in training, U(-0.5, 0.5) coordinate units (half a
patch) per sample and token are added before normalising, the paper's position perturbation.

Init (ours; the reference code's default is P ~ N(0, 1)): P_j ~ N(0, sigma_j^2), sigma_j = r_j / sqrt(2 (b - 1)),
so that r_j is the RMS rotation rate of block j's invariant planes in radians per image side. The r_j are
geometric over ``rate_range`` = (0.16, 16), like RoPE's ladder on a 16-patch side (16: about 1 rad per patch,
RoPE's fastest pair; 0.16: nearly constant, about RoPE's slowest at theta = 100). AP ranks each axis' blocks on
the ladder; LD ranks all blocks and points theta_j in a random unit direction (as rope_mixed), so no block
starts blind to an axis.

Hook: rotate, q and k (B, H, N_total, d) -> same. Parameters per layer: P (H, J, b, b); LD also theta (ndim, J).
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

    Weight decay: none on the generators ``P`` (and on comrope_ld's ``theta``): decay would shrink every angle
    matrix toward 0, i.e. every rotation toward the identity and the encoding toward none, as it would rope_mixed's
    learned frequencies (which the RoPE-ViT reference keeps out of decay).

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    Args:
        dim: model width D; the head dim ``dim // num_heads`` must divide by ``block_size`` (comrope_ap: by ``block_size
            * ndim``, every axis owning whole blocks).
        num_heads: heads of the attention; each head has its own generators ``P``.
        ndim: position axes (2: rows and columns).
        block_size: b, the size of each rotation block: 2, 4 or 8 (8 is about 8x slower than 4).
        jitter: in training, add U(-0.5, 0.5) coordinate units per sample and token before normalising (the paper's
            position perturbation).
        rate_range: (lowest, highest) initial RMS rotation rate in radians per image side, both > 0; the blocks' rates
            start geometric over it (module doc, Init).
        prefix_position: the normalised position of prefix (cls) tokens on every axis: 0 gives them the identity,
            unrotated; the reference code places its cls token at 0.5, the image centre, so its cls rows and columns
            turn with the offset from the centre.
    """

    #: every axis owns whole blocks (AP), so the head dim must divide by block_size * ndim
    partitioned: ClassVar[bool] = False
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ('P',)

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

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), and its float32 sections run in ``autocast_off``, a
    context TorchScript's ``with`` refuses.

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
    """ComRoPE-LD: A_i = theta_i (P - P^T) blockwise: block j rotates by exp((x . theta_j) (P_j - P_j^T)).

    ``theta`` (ndim, J) starts as a random unit vector per block. Weight decay: none on ``theta`` either, like
    ``P``: decay would shrink each block's axis weights toward 0, i.e. its rotation toward the identity.

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not
    script: its hook takes ``Positions`` (see VisionTransformerPE), and its float32 sections run in ``autocast_off``, a
    context TorchScript's ``with`` refuses.

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
