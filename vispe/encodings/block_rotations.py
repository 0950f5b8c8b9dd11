"""Rotations of b-channel blocks for rotary encodings with learned generators (ComRoPE, HARoPE, LieRE): closed
forms for b = 2 and 4 (so(4) as commuting quaternion multiplications, ``isoclinic_frame``), ``expm`` with its own
backward for any b, and ``apply_blocks`` / ``transform_heads`` / ``rotate_in_frame`` to apply them to q and k.
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


def quaternion_exp(v: torch.Tensor) -> torch.Tensor:
    """exp(v) = cos|v| + sin|v| v / |v| for pure quaternions v (..., 3): unit quaternions (..., 4), real arithmetic
    (no complex dtype); finite values and gradients at v = 0 (the identity)."""
    norm = (v.square().sum(-1, keepdim=True) + 1e-24).sqrt()  # eps: a finite gradient where v vanishes
    return torch.cat([norm.cos(), v * (norm.sin() / norm)], dim=-1)


def exp_so4(gen: torch.Tensor) -> torch.Tensor:
    """exp(S) for any skew S (..., 4, 4), exactly and in closed form: S = L_a + R_b (``so4_split``) with commuting
    halves, so exp(S) = L_exp(a) R_exp(b), two unit quaternions (``quaternion_exp``) and one 4 x 4 product, where
    ``expm`` takes ten. float32-accurate wherever |a|, |b| are (no scaling and squaring)."""
    a, b = so4_split(gen)
    return quaternion_matrices(quaternion_exp(a))[0] @ quaternion_matrices(quaternion_exp(b))[1]


def isoclinic_frame(gen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For skew S (..., 4, 4): an orthogonal M (..., 4, 4) and rates omega (..., 2) with exp(t S) = M^T D(t omega) M,
    D rotating the channel pairs (0, 1) by t omega_0 and (2, 3) by t omega_1.

    S = L_a + R_b (``so4_split``); unit quaternions u, v turn a's and b's axes onto +-i (at most 90 degrees), so
    exp(t S) x = u* (e^(i alpha) y e^(i beta)) v* with y = u x v = M x, and e^(i alpha) y e^(i beta) rotates y's two
    complex halves at alpha + beta and alpha - beta: the isoclinic decomposition of so(4).
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
    """x (B, H, N, d) times dense[h]^T per head (dense (H, d, d) float32), or times dense[h] with ``transpose``, in
    x's dtype: the matrices depend only on parameters and are rounded once, so q . k stays relative.

    ``one_gemm`` (default: on CUDA): one (B*N, C) x (C, C) GEMM with the heads' matrices on the diagonal (no copies, H
    times the multiply-adds, for tensor cores); otherwise one bmm over the heads.
    """
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


def exp_thetas() -> list[tuple[int, float, float]]:
    """``expm``'s Taylor degrees m and their reach theta_m in float32 and float64 (Higham's backward-error bound, as
    ``torch.linalg.matrix_exp``'s; the tests recompute them).
    """
    return [(8, 0.58, 0.0499), (12, 1.4616, 0.2996), (16, 2.4782, 0.7802), (20, 3.5509, 1.4382), (24, 4.6497, 2.219)]


def _mm(a: torch.Tensor, b: torch.Tensor, last: bool, alpha: float = 1.0) -> torch.Tensor:
    """alpha a b for batches of matrices, (n, n, batch) when ``last``, else (batch, n, n)."""
    if not last:
        return torch.bmm(a, b) if alpha == 1.0 else torch.baddbmm(a, a, b, beta=0.0, alpha=alpha)
    out = (a[:, 0] * alpha).unsqueeze(1) * b[0].unsqueeze(0)
    return _mm_add_(out, a, b, last, alpha, 1)


def _mm_add_(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, last: bool, alpha: float = 1.0, start: int = 0):
    """out += alpha a b in place (out fresh, never a tensor autograd saved); ``start``: the first column of a."""
    if not last:
        return out.baddbmm_(a, b, alpha=alpha)
    for k in range(start, a.shape[1]):
        out.addcmul_(a[:, k].unsqueeze(1), b[k].unsqueeze(0), value=alpha)
    return out


def _tr(m: torch.Tensor, last: bool) -> torch.Tensor:
    """The transposed matrices (a view)."""
    return m.transpose(0, 1) if last else m.transpose(-1, -2)


def _exp_powers(a: torch.Tensor, last: bool) -> list[torch.Tensor]:
    """[A, A^2, A^3, A^4]: three matmuls."""
    a2 = _mm(a, a, last)
    return [a, a2, _mm(a2, a, last), _mm(a2, a2, last)]


def _exp_plan(powers: list[torch.Tensor], last: bool) -> tuple[int, int]:
    """(degree m, squarings s) with the fewest matmuls such that alpha(A) / 2^s <= theta_m for every matrix, alpha from
    the norms of A^1..A^4 (Al-Mohy and Higham 2009); (-1, 0) when not finite.
    """
    d: list[torch.Tensor] = []
    for k in range(4):  # (vector_norm over the rows is 20x slower than abs + sum here)
        p = powers[k].detach().abs()
        d.append((p.sum(0).amax(0) if last else p.sum(-2).amax(-1)).pow(1.0 / (k + 1)))
    alpha = torch.minimum(d[0], torch.minimum(torch.maximum(d[1], d[2]), torch.maximum(d[2], d[3])))
    norm = float(alpha.amax().item()) if alpha.numel() > 0 else 0.0
    if not math.isfinite(norm):
        return -1, 0
    best_degree, best_squarings, best_cost = 0, 0, 1 << 30
    for degree, theta32, theta64 in exp_thetas():
        # squarings = ceil(log2(norm / theta)), at least 0, counted by exact doublings (TorchScript has no log2)
        squarings, limit = 0, theta64 if powers[0].dtype == torch.float64 else theta32
        while norm > limit:
            squarings, limit = squarings + 1, limit * 2.0
        cost = degree // 4 + 2 + squarings
        if cost <= best_cost:
            best_degree, best_squarings, best_cost = degree, squarings, cost
    return best_degree, best_squarings


def _taylor_coefficients(degree: int) -> list[float]:
    """1 / k! for k = 0 .. degree."""
    coef = [1.0]
    for k in range(1, degree + 1):
        coef.append(coef[-1] / k)
    return coef


def _exp_series(
    powers: list[torch.Tensor], degree: int, squarings: int, last: bool
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """exp(A) from [A, A^2, A^3, A^4]: the degree-m Taylor polynomial of A / 2^s by Paterson-Stockmeyer in X^4, then s
    squarings; also the Horner values and squared matrices the backward reuses.
    """
    scale = 0.5**squarings  # a power of 2: X^k = A^k scale^k exactly, folded into the coefficients
    coef = _taylor_coefficients(degree)
    s = [scale**k for k in range(5)]
    blocks = degree // 4
    out = powers[3] * (coef[degree] * s[4])
    horner: list[torch.Tensor] = []
    for i in range(blocks - 1, -1, -1):
        if i < blocks - 1:
            horner.insert(0, out)
            out = _mm_add_(powers[2] * (coef[4 * i + 3] * s[3]), powers[3], out, last, s[4])
        else:
            out = out.add_(powers[2], alpha=coef[4 * i + 3] * s[3])
        out = out.add_(powers[1], alpha=coef[4 * i + 2] * s[2]).add_(powers[0], alpha=coef[4 * i + 1] * s[1])
        (out.diagonal(dim1=0, dim2=1) if last else out.diagonal(dim1=-2, dim2=-1)).add_(coef[4 * i])
    squares: list[torch.Tensor] = []
    for _ in range(squarings):
        squares.append(out)
        out = _mm(out, out, last)
    return out, horner, squares


class _Expm(torch.autograd.Function):
    """``expm`` with a hand-written backward, the adjoint of its own matmul chain: the squarings in reverse, the
    Paterson-Stockmeyer Horner steps in reverse, then the powers; two matmuls per forward matmul, accumulated in
    place, and no autograd graph. It saves A, A^2, A^4, the Horner values and the squared matrices."""

    @staticmethod
    def forward(
        ctx,
        a: torch.Tensor,
        a2: torch.Tensor,
        a3: torch.Tensor,
        a4: torch.Tensor,
        degree: int,
        squarings: int,
        last: bool,
    ) -> torch.Tensor:
        out, horner, squares = _exp_series([a, a2, a3, a4], degree, squarings, last)
        ctx.degree, ctx.squarings, ctx.last = degree, squarings, last
        ctx.save_for_backward(a, a2, a4, *horner, *squares)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        degree, squarings, last = ctx.degree, ctx.squarings, ctx.last
        a, a2, a4, *rest = ctx.saved_tensors
        blocks = degree // 4
        horner, squares = rest[: blocks - 1], rest[blocks - 1 :]
        grad = grad.contiguous()  # (a permuted view of the caller's gradient when ``last``)
        for q in reversed(squares):  # T^(2^(k+1)) = q q
            qt = _tr(q, last)
            grad = _mm_add_(_mm(grad, qt, last), qt, grad, last)
        scale = 0.5**squarings
        s4 = scale**4
        coef = _taylor_coefficients(degree)
        grads: list[torch.Tensor] = []  # dL/dY_i
        g_a4: torch.Tensor | None = None  # dL/dA^4 = s4 dL/dX^4
        for i in range(blocks):
            grads.append(grad)
            if i < blocks - 1:  # Y_i = C_i + X^4 Y_{i+1}, X^4 = s4 A^4
                ht = _tr(horner[i], last)
                g_a4 = _mm(grad, ht, last, s4) if g_a4 is None else _mm_add_(g_a4, grad, ht, last, s4)
                grad = _mm(_tr(a4, last), grad, last, s4)
        # Y_{r-1} = C_{r-1} + c_m X^4
        g_a4 = grads[-1] * (coef[degree] * s4) if g_a4 is None else g_a4.add_(grads[-1], alpha=coef[degree] * s4)
        g_pow: list[torch.Tensor] = []  # dL/dA^j = scale^j sum_i c_{4i+j} dL/dY_i, j = 1, 2, 3
        for j in (1, 2, 3):
            g = grads[0] * (coef[j] * scale**j)
            for i in range(1, blocks):
                g.add_(grads[i], alpha=coef[4 * i + j] * scale**j)
            g_pow.append(g)
        g_a1, g_a2, g_a3 = g_pow
        at, a2t = _tr(a, last), _tr(a2, last)
        for x, y in ((g_a4, a2t), (a2t, g_a4), (g_a3, at)):  # A^4 = A^2 A^2, A^3 = A^2 A
            _mm_add_(g_a2, x, y, last)
        for x, y in ((a2t, g_a3), (g_a2, at), (at, g_a2)):  # A^3 = A^2 A, A^2 = A A
            _mm_add_(g_a1, x, y, last)
        return g_a1, None, None, None, None, None, None


def _layout(a: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """a (..., n, n) as (batch, n, n), or for n <= 8 "batch last", (n, n, batch) (a copy), and which: there a
    product is n broadcast multiply-adds over the batch, faster on CPU than ``torch.bmm`` on small matrices."""
    flat = a.reshape(-1, a.shape[-2], a.shape[-1])
    last = a.shape[-1] <= 8  # a literal: TorchScript reads no global ints
    return (flat.permute(1, 2, 0).contiguous() if last else flat), last


def _unlayout(out: torch.Tensor, a: torch.Tensor, last: bool) -> torch.Tensor:
    """``_layout``'s inverse, in a's shape, contiguous (a copy when ``last``: bmm on the permuted view would loop
    over the matrices one by one)."""
    return (out.permute(2, 0, 1).contiguous() if last else out).reshape(a.shape)


@torch.jit.unused
def _expm_with_backward(a: torch.Tensor) -> torch.Tensor:
    """``_Expm`` on a (the powers that choose degree and squarings are computed once, outside autograd)."""
    x, last = _layout(a)
    with torch.no_grad():
        powers = _exp_powers(x.detach(), last)
    degree, squarings = _exp_plan(powers, last)
    if degree < 0:
        return torch.linalg.matrix_exp(a)
    return _unlayout(_Expm.apply(x, powers[1], powers[2], powers[3], degree, squarings, last), a, last)


def expm_plain(a: torch.Tensor) -> torch.Tensor:
    """``expm``'s forward as plain tensor operations, differentiated by autograd if at all: the path without
    gradient, the scripted one, and the tests' reference for ``_Expm``'s backward."""
    x, last = _layout(a)
    powers = _exp_powers(x, last)
    degree, squarings = _exp_plan(powers, last)
    if degree < 0:
        return torch.linalg.matrix_exp(a)
    return _unlayout(_exp_series(powers, degree, squarings, last)[0], a, last)


@torch.fx.wrap
def expm(a: torch.Tensor) -> torch.Tensor:
    """exp(a) for a batch (..., n, n), float32- (float64-) accurate: a Taylor polynomial of degree m in 8, 12, .. 24
    on A / 2^s by Paterson-Stockmeyer, then s squarings, m and s giving the fewest matmuls under a bound on the batch's
    spectral radii (``exp_thetas``, ``_exp_plan``).

    Backward (``_Expm``): the adjoint of the same chain, two matmuls per forward matmul, no autograd graph; faster
    than ``torch.linalg.matrix_exp`` on LieRE's and HARoPE's matrices (``workbench/expm_bench.py`` measures it).
    Degree and squarings are read on the host, so compiled code calls ``torch.linalg.matrix_exp`` instead; an FX
    leaf; scripted, it runs ``expm_plain``, the same forward.
    """
    if torch.compiler.is_compiling():  # the norm read would break the graph; matrix_exp traces as one op
        return torch.linalg.matrix_exp(a)
    if torch.jit.is_scripting() or not (a.requires_grad and torch.is_grad_enabled()):
        return expm_plain(a)
    return _expm_with_backward(a)


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
    'apply_blocks',
    'block_diagonal',
    'exp_skew',
    'exp_so4',
    'exp_thetas',
    'expm',
    'expm_plain',
    'isoclinic_frame',
    'quaternion_exp',
    'quaternion_matrices',
    'rotate_in_frame',
    'so4_split',
    'transform_heads',
    'unit_quaternion',
]
