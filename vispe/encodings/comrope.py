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
identity, bit for bit).

Cost: what depends on positions and parameters (t, the frames, the angle table) once per forward pass and layer,
shared by the batch (per sample only with ``jitter``). b = 4 on CPU: 1.13x ape_learned (ViT-S/16 224, batch 8,
float32; README). On GPU: two frame GEMMs and two rotation passes over q and k plus two elementwise passes (the
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
from collections.abc import Callable, Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings.base import Encoding
from vispe.encodings.rotary import rotate_by_rows
from vispe.kernels.rotary import rotary_table, rotate_qk
from vispe.layout import TokenLayout
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS

BLOCK_SIZES = (2, 4, 8)


def quaternion_matrices(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., 4, 4) matrices of x -> p x and x -> x p for quaternions p (..., 4) = (w, x, y, z)."""
    w, x, y, z = p.unbind(-1)
    left = torch.stack([w, -x, -y, -z, x, w, -z, y, y, z, w, -x, z, -y, x, w], dim=-1)
    right = torch.stack([w, -x, -y, -z, x, w, z, -y, y, -z, w, x, z, y, -x, w], dim=-1)
    return left.unflatten(-1, (4, 4)), right.unflatten(-1, (4, 4))


def so4_split(gen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Skew S (..., 4, 4) = L_a + R_b: the pure quaternions a, b (..., 3) of its left and right parts.

    L_u, R_u for u = i, j, k are an orthogonal basis of so(4) (squared norm 4 each); the two halves commute.
    """
    left, right = quaternion_matrices(torch.eye(4, device=gen.device, dtype=gen.dtype)[1:])  # (3, 4, 4) each
    return torch.einsum('...xy,mxy->...m', gen, left) / 4, torch.einsum('...xy,mxy->...m', gen, right) / 4


def unit_quaternion(v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """exp(t v) = cos t|v| + sin t|v| v/|v| for pure quaternions v (H, J, 3) and t (..., N, J), as Cayley-Dickson
    complex pairs (w + x i, y + z i): (..., H, N, J, 2) complex64."""
    norm = v.square().sum(-1).add(1e-24).sqrt()  # eps: finite gradients if a part vanishes
    phi = t[..., None, :, :] * norm[:, None, :]  # (..., H, N, J)
    sin = phi.sin()[..., None] * (v / norm[..., None])[:, None]  # (..., H, N, J, 3)
    return torch.complex(torch.stack([phi.cos(), sin[..., 1]], -1), torch.stack([sin[..., 0], sin[..., 2]], -1))


def isoclinic_frame(gen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For skew S (..., 4, 4): an orthogonal M (..., 4, 4) and two rates omega (..., 2) with
    exp(t S) = M^T D(t omega) M, D rotating the channel pairs (0, 1) by t omega_0 and (2, 3) by t omega_1.

    S = L_a + R_b (``so4_split``), so exp(t S) x = exp(t a) x exp(t b) for quaternions x. Unit quaternions u and v
    turn the axes: u a^ u* = s_a i and v (s_b i) v* = b^ (a^ = a / |a|, s_a = +-1 the sign of a^'s i part, so the
    turn is at most 90 degrees and u, v stay well defined; the same for b). Then exp(t a) = u* e^(i s_a |a| t) u and
    exp(t b) = v e^(i s_b |b| t) v*, so exp(t S) x = u* (e^(i alpha) y e^(i beta)) v* with y = u x v = M x,
    M = L_u R_v, alpha = s_a |a| t, beta = s_b |b| t. For y = y1 + y2 j (y1, y2 complex: channels (0, 1), (2, 3)),
    e^(i alpha) y e^(i beta) = e^(i (alpha + beta)) y1 + e^(i (alpha - beta)) y2 j, as j z = conj(z) j: two plane
    rotations (the isoclinic decomposition of so(4)), RoPE's complex multiplication at rates s_a |a| +- s_b |b|.
    """
    a, b = so4_split(gen)  # (..., 3) each
    norm_a, norm_b = (v.square().sum(-1).add(1e-24).sqrt() for v in (a, b))  # eps: a vanishing part gives M = I
    unit_a, unit_b = a / norm_a[..., None], b / norm_b[..., None]
    sign_a, sign_b = ((v[..., 0] >= 0).to(v.dtype) * 2 - 1 for v in (unit_a, unit_b))
    i_a, i_b = (F.pad(s[..., None], (0, 2)) for s in (sign_a, sign_b))  # s_a i, s_b i as (..., 3) vectors

    def turn(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:  # the unit quaternion w with w src w* = dst
        w = torch.cat([1 + (src * dst).sum(-1, keepdim=True), torch.linalg.cross(src, dst)], -1)
        return w * w.square().sum(-1, keepdim=True).rsqrt()

    frame = quaternion_matrices(turn(unit_a, i_a))[0] @ quaternion_matrices(turn(i_b, unit_b))[1]
    alpha, beta = sign_a * norm_a, sign_b * norm_b
    return frame, torch.stack([alpha + beta, alpha - beta], -1)


def block_diagonal(blocks: torch.Tensor) -> torch.Tensor:
    """(..., J, b, b) blocks -> (..., Jb, Jb): the block-diagonal matrix with block j at (j, j)."""
    eye = torch.eye(blocks.shape[-3], device=blocks.device, dtype=blocks.dtype)
    dense = torch.einsum('...jab,jk->...jakb', blocks, eye)  # (..., J, b, J, b)
    return dense.flatten(-4, -3).flatten(-2, -1)  # flatten: no shape unpacking for FX


def transform_heads(
    x: torch.Tensor, dense: torch.Tensor, transpose: bool = False, one_gemm: bool | None = None
) -> torch.Tensor:
    """x (B, H, N, d) times dense[h]^T per head (dense (H, d, d) float32: ComRoPE's block-diagonal frames, HARoPE's
    M), or times dense[h] with ``transpose``, in x's dtype (bf16 under autocast: the matrices depend only on
    parameters and are rounded once; every token gets the same matrix, so q . k stays relative). Token-major x (timm's
    q, k) is read as a view; the result is token-major too.

    ``one_gemm`` (default: on CUDA): one (B*N, C) x (C, C) GEMM on the token-major rows with the heads' matrices on
    the diagonal of a C x C matrix: no copy in or out, H times the multiply-adds, which tensor cores absorb (ViT-B/16
    at 448 px, batch 16: 15 GFLOP, tens of microseconds on an H100-class GPU; not yet measured there). Otherwise one
    (B*N, d) x (d, d) matmul per head (bmm): on CPU half the time of a 4 x 4 einsum per block and a quarter of 16
    elementwise products (0.8, 1.5 and 3.0 ms at B=32, N=65, H=3, d=64), and no wasted multiply-adds."""
    B, H, N, d = x.shape
    w = (dense if transpose else dense.transpose(-1, -2)).to(x.dtype)  # rows @ w[h]
    if one_gemm is None:  # an FX trace (device unknown, a Proxy) records the per-head form
        one_gemm = not isinstance(x, torch.fx.Proxy) and x.is_cuda
    if one_gemm:
        out = x.transpose(1, 2).flatten(2) @ block_diagonal(w)  # (B, N, C)
        return out.unflatten(-1, (H, d)).transpose(1, 2)
    rows = x.transpose(1, 2).reshape(B * N, H, d).transpose(0, 1)  # (H, B*N, d)
    return torch.bmm(rows, w).transpose(0, 1).reshape(B, N, H, d).transpose(1, 2)


def rotate_in_frame(
    q: torch.Tensor,
    k: torch.Tensor,
    frame: torch.Tensor,
    rotate: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """M^T rotate(M q), M^T rotate(M k) for frames M (H, d/4, 4, 4) (``isoclinic_frame``), in q's dtype, returned as
    x + M^T (rotate(y) - y): a token at angle 0 (prefix, padding) keeps x bit for bit (its rotation returns y
    itself), where M^T M x would round it. ``rotate`` turns both in M's frame (a table, or rows)."""
    dense = block_diagonal(frame)  # (H, d, d), once for the four products
    qy, ky = transform_heads(q, dense), transform_heads(k, dense)
    qr, kr = rotate(qy, ky)
    return q + transform_heads(qr - qy, dense, True), k + transform_heads(kr - ky, dense, True)


#: Taylor degree of ``expm`` on matrices scaled to 1-norm <= 1/2: truncation error <= 0.5^9 / 9! ~ 5e-9
EXP_DEGREE = 8


@torch.fx.wrap
def expm(a: torch.Tensor, degree: int = EXP_DEGREE) -> torch.Tensor:
    """exp(a) for a batch (..., n, n): scaling and squaring of a ``degree`` (8) Taylor polynomial (float32-accurate).

    The scheme of ``torch.linalg.matrix_exp``, but differentiated as plain matmuls, whereas matrix_exp's backward
    exponentiates a 2n x 2n block matrix: forward + backward take 1/4 of its time for HARoPE's (2H, 64, 64), 1/2
    for (H, N, J, 8, 8). The number of squarings comes from the norm, read on the host (a device sync on GPU);
    under ``torch.compile`` that read would break the graph, so compiled code calls ``torch.linalg.matrix_exp``.
    An FX leaf (``torch.fx.wrap``): an FX graph calls it at run time, where the norm is a number, so the traced model
    computes what the eager one does, bit for bit; it is TorchScript-compatible, so such a graph can be scripted.
    """
    if torch.compiler.is_compiling():  # the norm read below would break the graph; matrix_exp traces as one op
        return torch.linalg.matrix_exp(a)
    norm = float(a.detach().abs().sum(-2).amax().item())  # the 1-norm, worst matrix of the batch
    if not math.isfinite(norm):
        return torch.linalg.matrix_exp(a)
    # squarings = ceil(log2(norm / 0.5)), at least 0: the fewest halvings to a norm <= 1/2, counted by exact doublings
    # (TorchScript has no math.log2; for a float32 norm this is the same count)
    squarings, limit = 0, 0.5
    while norm > limit:
        squarings, limit = squarings + 1, limit * 2.0
    x = a / 2**squarings
    eye = torch.eye(a.shape[-1], device=a.device, dtype=a.dtype)
    out = eye + x / degree  # the degree comes in as an argument: TorchScript reads no global ints
    for k in range(degree - 1, 0, -1):  # Horner: I + x (I + x/2 (... (I + x/8))...)
        out = eye + (x @ out) / k
    for _ in range(squarings):
        out = out @ out
    return out


def exp_skew(gen: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """exp(t S) for skew generators S (H, J, b, b) and multipliers t (..., N, J) -> (..., H, N, J, b, b).

    Closed forms for b = 2 (a rotation by t S[1, 0]) and b = 4 (L_p R_r: L_a and R_b commute, so exp(t S) =
    exp(t L_a) exp(t R_b)); ``expm`` otherwise.
    """
    b = gen.shape[-1]
    if b == 4:
        p, r = (torch.view_as_real(unit_quaternion(v, t)).flatten(-2) for v in so4_split(gen))  # (..., 4)
        return quaternion_matrices(p)[0] @ quaternion_matrices(r)[1]
    angle_gen = t[..., None, :, :, None, None] * gen[:, None]  # (..., H, N, J, b, b)
    if b == 2:
        cos, sin = angle_gen[..., 1, 0].cos(), angle_gen[..., 1, 0].sin()
        return torch.stack([cos, -sin, sin, cos], dim=-1).unflatten(-1, (2, 2))
    return expm(angle_gen)


def apply_blocks(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x (B, H, N, d) with each b-channel block j of token n multiplied by rot ([B,] H, N, d/b, b, b)."""
    blocks = x.float().unflatten(-1, rot.shape[-3:-1])  # (B, H, N, d/b, b)
    pattern = 'hnjab,xhnjb->xhnja' if rot.dim() == 5 else 'xhnjab,xhnjb->xhnja'
    return torch.einsum(pattern, rot, blocks).flatten(-2).type_as(x)


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
    ) -> None:
        super().__init__()
        head_dim, name = dim // num_heads, self.registry_name()
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
        """t = x W (..., num_prefix + N, J), float32; prefix tokens get t = 0, the identity."""
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
        if pos.layout is not None:  # a mixed batch: its prefix (and padding) tokens at x = 0, the identity
            x = x * pos.layout.patch_mask(x.device)[..., None]
        return self.rotate_normalized(q, k, x, pos.num_prefix)

    def rotate_grid_cells(
        self, q: torch.Tensor, k: torch.Tensor, layout: TokenLayout
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixed batch on its images' own grids: the rotations are computed once per cell of each distinct grid
        (at ((r + 0.5) / h, (c + 0.5) / w), as ``normalized_coords``) plus one identity row, and each token takes
        its row (``layout.table_index``; prefix and padding tokens the identity), not once per token of the batch."""
        coords, sizes = layout.grid_cells(q.device)
        x = torch.cat([(coords + 0.5) / sizes, coords.new_zeros(1, coords.shape[-1])])  # (R, ndim)
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


__all__ = ['ComRoPE', 'ComRoPEAP', 'ComRoPELD', 'exp_skew', 'expm', 'isoclinic_frame', 'so4_split']
