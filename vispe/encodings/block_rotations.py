"""Rotations of b-channel blocks for rotary encodings with learned generators (ComRoPE, HARoPE): the maths, apart
from the encodings that use it.

* b = 4: so(4) splits into commuting left and right quaternion multiplications (``so4_split``,
  ``quaternion_matrices``), so exp(t S) = exp(t a) x exp(t b), and ``isoclinic_frame`` turns both axes onto i: a fixed
  orthogonal frame per head and block and two plane rotations, so that only angles depend on the token.
* Any b: ``expm``, a matrix exponential differentiated as plain matmuls (float32-accurate), ``exp_skew`` with closed
  forms for b = 2 and 4, and ``apply_blocks`` / ``transform_heads`` / ``rotate_in_frame`` to apply them to q and k.

Cost: tables of (H, N, J, b, b) or frames of (H, d, d), computed once per forward and layer and shared by the batch;
see each function.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


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


__all__ = [
    'EXP_DEGREE',
    'apply_blocks',
    'block_diagonal',
    'exp_skew',
    'expm',
    'isoclinic_frame',
    'quaternion_matrices',
    'rotate_in_frame',
    'so4_split',
    'transform_heads',
    'unit_quaternion',
]
