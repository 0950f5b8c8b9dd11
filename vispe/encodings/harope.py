"""HARoPE: head-wise adaptive rotary position encoding (Li et al., 2025, for diffusion transformers).

Per head an invertible M = U diag(s) V^T (d x d) mixes the channels before 2D axial RoPE (theta = 10000, d/2
channels per axis): q -> M q and k -> M^-T k, so that the score

    (R_m M q)^T (R_n M^-T k) = q^T M^T R(n - m) M^-T k

still depends only on the offset n - m, while each head chooses which channel directions rotate at which
frequency. U = exp(g (A_u - A_u^T)) and V = exp(g (A_v - A_v^T)) are orthogonal (g = ``generator_scale``, 1 by
default; the authors' code, Studentxll/HARoPE, uses g = 1/2), s = softplus(sigma) + 1e-6 > 0, so
M^-1 = V diag(1/s) U^T in closed form (and M^-T = U diag(1/s) V^T: M and M^-T differ only in s vs 1/s).
Init A_u = A_v = 0, sigma = log(e - 1) (softplus = 1): M = I up to the 1e-6, and training starts as plain
RoPE; the gradients there are non-zero (the differential of exp at 0 is the identity).

Prefix tokens: M and M^-T act on every token, cls included (no slicing); RoPE then leaves the prefix unrotated.
Scores among patches stay relative, prefix-prefix scores are unchanged (q^T M^T M^-T k = q^T k), and a cls-patch
score q^T M^T R_n M^-T k sees the same sandwich as patch-patch ones (it is absolute in any case). The resolution
strategies (none / interpolate / ntk / yarn, and DyPE's dype_ntk / dype_yarn for a DiT's sampler) are RoPEAxial's,
applied to the rotation after M.

U and V are computed once per forward, (H, d, d) in float32, by ``expm`` (scaling and squaring, checked against
``torch.linalg.matrix_exp`` in the tests; its backward is 4x cheaper); M and M^-T are rounded once to q's dtype and
q and k are transformed in that dtype (bf16 under autocast: one tensor-core GEMM each), then rotated by the fused
rotary kernel. Hook: rotate, q and k (B, H, N_total, d) -> same. Parameters per layer: A_u, A_v (H, d, d), sigma (H, d).

Cost: position- and parameter-only work (two (H, d, d) exponentials, M, M^-T, the rotation table) once per forward
pass and layer, never per sample. CPU: 1.06x ape_learned (ViT-S/16 224, batch 8, float32; docs). GPU: rope_axial's
rotation plus one (B*N, C) x (C, C) GEMM on q and one on k; not yet measured on a GPU in this form (2.75x before:
float32 transforms with casts around them).
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
    """HARoPE: q -> M q, k -> M^-T k per head, then RoPEAxial's rotation (theta = 10000).

    Weight decay: none on ``A_u``, ``A_v`` and ``sigma``. The paper trains on DiT's recipe, AdamW without weight
    decay, so nothing of M is decayed there; under a decayed recipe, decay on A_u and A_v would pull each head back
    toward plain RoPE and decay on sigma would pull s off 1 toward softplus(0) = 0.69, neither a prior of the method.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (``expm`` is a scriptable leaf); its Python code does
    not script: as RoPEAxial (its hook takes ``Positions``, see VisionTransformerPE; ``train_grid`` is a tuple of any
    length; tables from a ``GridTableCache``).

    Args:
        dim: the attention's width; the head dim ``dim // num_heads`` must divide by 2 * ndim.
        num_heads: the attention's heads (each has its own M).
        ndim: position axes.
        theta: base of RoPEAxial's frequency ladder, > 0.
        grid_size: the training grid (supplied by the backbone), needed by every strategy but ``none``.
        generator_scale: g > 0 in U = exp(g (A_u - A_u^T)), V likewise. The same matrices either way (A scaled by 1 /
            g); g sets how fast a step on A turns U and V. 0.5 is the authors' code's ``(A - A^T) / 2``, whose A are
            then loaded as they are.
    """

    ndims = (2,)  # images: its video form (RoPEAxial's sections under M) is not built yet
    no_weight_decay_params = ('A_u', 'A_v', 'sigma')

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
