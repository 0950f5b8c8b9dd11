"""HARoPE: head-wise adaptive rotary position encoding (Li et al., 2025; Studentxll/HARoPE).

Per head an invertible M = U diag(s) V^T mixes the channels around 2D axial RoPE: q -> M q, k -> M^-T k, so the
score q^T M^T R(n - m) M^-T k still depends only on the offset. U = exp(g (A_u - A_u^T)), V likewise (orthogonal;
g = ``generator_scale``, the authors' 1/2), s = softplus(sigma) + 1e-6; at init M = I up to the 1e-6. M acts on every
token, prefix included; the strategies are rope_axial's, after M.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.block_rotations import expm, transform_heads
from vispe.encodings.rope import RoPEAxial
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS

torch.fx.wrap('expm')  # an FX graph calls expm at run time (the block_rotations leaf), also from this module


@ENCODINGS.register_module(name='harope')
class HARoPE(RoPEAxial):
    """HARoPE: q -> M q, k -> M^-T k per head, then rope_axial's rotation.

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must divide by 2 * ndim.
        num_heads: the attention's heads (each has its own M).
        ndim: position axes.
        theta: base of rope_axial's frequency ladder, > 0.
        grid_size: the training grid (the backbone supplies it), needed by every strategy but ``none``.
        generator_scale: g > 0 in U = exp(g (A_u - A_u^T)), V likewise: the same matrices either way, g sets how fast a
            step on A turns them; 0.5 loads the authors' A as they are.
    """

    ndims = (2,)  # images: its video form (RoPEAxial's sections under M) is not built yet
    no_weight_decay_params = ('A_u', 'A_v', 'sigma')
    weight_decay_note = 'the paper trains without decay; decay would pull each head back to RoPE'

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        theta: float = 10000.0,
        grid_size: Sequence[int] | None = None,
        generator_scale: float = 1.0,
    ) -> None:
        super().__init__(dim, num_heads, ndim=ndim, theta=theta, grid_size=grid_size)
        number = isinstance(generator_scale, (int, float)) and not isinstance(generator_scale, bool)
        if not number or not 0 < generator_scale < math.inf:
            raise ValueError(f'harope: generator_scale must be a number > 0 (authors: 0.5), got {generator_scale!r}')
        self.num_heads, self.generator_scale = num_heads, float(generator_scale)
        d = self.head_dim
        self.A_u = nn.Parameter(torch.empty(num_heads, d, d))
        self.A_v = nn.Parameter(torch.empty(num_heads, d, d))
        self.sigma = nn.Parameter(torch.empty(num_heads, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.A_u)
        nn.init.zeros_(self.A_v)
        nn.init.constant_(self.sigma, math.log(math.e - 1.0))  # softplus(sigma) = 1

    def factors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """U, V (H, d, d) orthogonal and s (H, d) > 0, float32, with M = U diag(s) V^T."""
        a = torch.cat([self.A_u, self.A_v]).float()  # one exponential for both: one norm read, half the calls
        with autocast_off(a):  # expm's matmuls would otherwise run in bf16
            skew = a - a.transpose(-1, -2)
            u, v = expm(skew if self.generator_scale == 1.0 else skew * self.generator_scale).chunk(2)
        return u, v, F.softplus(self.sigma.float()) + 1e-6

    def mixing(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(M, M^-T), each (H, d, d) float32."""
        u, v, s = self.factors()
        with autocast_off(u):
            return (u * s[:, None, :]) @ v.transpose(-1, -2), (u / s[:, None, :]) @ v.transpose(-1, -2)

    def transform(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q -> M q, k -> M^-T k on (B, H, N, d) rows (q @ M^T, k @ M^-1), in q's dtype: M and M^-T are made in
        float32 once per forward pass and rounded once; every token gets the same matrices, so the score stays a
        function of the offset (``transform_heads``: one GEMM on CUDA, a per-head bmm on CPU)."""
        with autocast_off(q):
            m, m_inv_t = self.mixing()
            return transform_heads(q, m), transform_heads(k, m_inv_t)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        q2, k2 = self.transform(q, k)
        return super().rotate(q2, k2, pos)


__all__ = ['HARoPE']
