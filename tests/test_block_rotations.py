"""``expm`` (block_rotations): its forward equals ``torch.linalg.matrix_exp`` to the precision it is planned for, its
hand-written backward (``_Expm``) equals autograd through the same operations (``expm_plain``) and
``torch.linalg.matrix_exp``'s gradient, ``gradcheck`` passes on skew and general matrices, and the reach table
``exp_thetas`` is what the backward-error bound gives."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from vispe.encodings import block_rotations as br


def skew(batch: int, b: int, scale: float, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """Random skew-symmetric (batch, b, b) blocks with entries of size ~scale / b."""
    u = torch.randn(batch, b, b, generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale / b
    return u - u.mT


def grads(fn, a: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = a.detach().clone().requires_grad_()
    out = fn(x)
    return out.detach(), torch.autograd.grad(out, x, g)[0]


@pytest.mark.parametrize('b', [3, 4, 8])
@pytest.mark.parametrize('scale', [0.01, 1.0, 5.0, 40.0])
def test_backward_equals_autograd_and_matrix_exp_in_float64(b: int, scale: float) -> None:
    """Float64, skew blocks from near 0 to LieRE-init-size norms (1 to 5 squarings): the forward equals
    ``expm_plain`` bit for bit and matrix_exp to 1e-12; the gradient equals autograd through ``expm_plain`` (the
    same chain) to 1e-12 and matrix_exp's to 1e-10, relative to its largest entry."""
    a = skew(40, b, scale)
    g = torch.randn(a.shape, generator=torch.Generator().manual_seed(1), dtype=a.dtype)
    out, grad = grads(br.expm, a, g)
    plain, grad_plain = grads(br.expm_plain, a, g)
    ref, grad_ref = grads(torch.linalg.matrix_exp, a, g)
    assert torch.equal(out, plain)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    top = grad_ref.abs().max()
    torch.testing.assert_close(grad / top, grad_plain / top, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad / top, grad_ref / top, atol=1e-10, rtol=0)


@pytest.mark.parametrize('b', [3, 8])
@pytest.mark.parametrize('scale', [0.5, 20.0])
@pytest.mark.parametrize('kind', ['skew', 'general'])
def test_gradcheck(b: int, scale: float, kind: str) -> None:
    """``torch.autograd.gradcheck`` (finite differences against the hand-written backward) in float64, on skew
    matrices and on general ones (the backward assumes no structure), with leading batch dimensions."""
    a = skew(6, b, scale) if kind == 'skew' else torch.randn(6, b, b, dtype=torch.float64) * scale / b
    assert torch.autograd.gradcheck(br.expm, (a.reshape(2, 3, b, b).requires_grad_(),))


def test_float32_accuracy_and_cost_at_liere_init() -> None:
    """LieRE's (H, N, J, 8, 8) angle matrices at init (entries U(0, 2 pi), 14 x 14 grid): float32 forward within
    1e-5 of float64 matrix_exp (as float32 matrix_exp), gradient within 1e-5 relative, in at most 10 matmuls."""
    from vispe.encodings.liere import LieRE

    torch.manual_seed(0)
    enc = LieRE(384, 6)
    r = torch.arange(14.0)
    grid = torch.stack(torch.meshgrid(r, r, indexing='ij'), -1).reshape(-1, 2)
    m = enc.angle_matrices(enc.scale_grid(grid, torch.tensor([14.0, 14.0])), 1).detach()  # (6, 197, 8, 8, 8)
    degree, squarings = br._exp_plan(br._exp_powers(m.reshape(-1, 8, 8), False), False)
    assert degree // 4 + 2 + squarings <= 10
    g = torch.randn_like(m)
    out, grad = grads(br.expm, m, g)
    ref, grad_ref = grads(torch.linalg.matrix_exp, m.double(), g.double())
    assert (out.double() - ref).abs().max() < 1e-5
    assert (grad.double() - grad_ref).abs().max() < 1e-5 * grad_ref.abs().max()


def test_no_grad_path_scripting_and_non_finite_input() -> None:
    """Without gradient the same forward runs (bit for bit); ``torch.jit.script(expm)`` computes it too and
    differentiates it by autograd; a non-finite input goes to matrix_exp (NaN out, no error)."""
    a = skew(10, 8, 30.0, dtype=torch.float32)
    with torch.no_grad():
        plain = br.expm(a)
    assert torch.equal(br.expm(a.clone().requires_grad_()).detach(), plain)
    scripted = torch.jit.script(br.expm)
    x = a.clone().requires_grad_()
    assert torch.equal(scripted(x), plain)
    scripted(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    bad = a.clone()
    bad[0, 0, 1] = float('nan')
    assert torch.isnan(br.expm(bad.requires_grad_())[0]).any()


def reach(degree: int, unit: float) -> float:
    """The largest alpha with -log(1 - h(alpha)) <= unit alpha, h(x) = sum_{j > m} |c_j| x^j for
    e^(-x) T_m(x) - 1 = sum_j c_j x^j (bisection)."""
    coef = [
        abs(float(sum(Fraction((-1) ** (j - i), math.factorial(i) * math.factorial(j - i)) for i in range(degree + 1))))
        for j in range(degree + 1, degree + 120)
    ]
    lo, hi = 1e-6, 20.0
    for _ in range(100):
        mid = (lo + hi) / 2
        h = sum(c * mid ** (degree + 1 + k) for k, c in enumerate(coef))
        lo, hi = (mid, hi) if h < 1 and -math.log1p(-h) <= unit * mid else (lo, mid)
    return lo


def test_thetas_are_the_backward_error_bound() -> None:
    """Every theta in ``exp_thetas`` is at most the bound's value (u = 2^-24, 2^-53) and within 1e-3 below it."""
    for degree, theta32, theta64 in br.exp_thetas():
        for theta, unit in ((theta32, 2.0**-24), (theta64, 2.0**-53)):
            exact = reach(degree, unit)
            assert exact - 1e-3 <= theta <= exact, (degree, theta, exact)


@pytest.mark.parametrize('scale', [0.0, 0.01, 1.0, 40.0])
def test_exp_so4_is_the_exponential_and_its_gradient_in_closed_form(scale: float) -> None:
    """``exp_so4`` (LieRE at b = 4): in float64 it equals matrix_exp to 1e-10, from the zero matrix to LieRE-init
    norms; its gradient is matrix_exp's projected onto skew matrices (it reads only the skew part of its input, the
    only part a skew generator can move) to 1e-10 of the largest entry, and finite where the quaternions vanish."""
    a = skew(40, 4, scale)
    g = torch.randn(a.shape, generator=torch.Generator().manual_seed(1), dtype=a.dtype)
    out, grad = grads(br.exp_so4, a, g)
    ref, grad_ref = grads(torch.linalg.matrix_exp, a, g)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    assert torch.isfinite(grad).all()
    skew_ref = (grad_ref - grad_ref.mT) / 2
    top = skew_ref.abs().max()
    torch.testing.assert_close(grad / top, skew_ref / top, atol=1e-10, rtol=0)
