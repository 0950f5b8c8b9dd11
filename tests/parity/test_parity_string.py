"""Parity of ``string_cayley`` and ``string_circulant`` with the STRING paper's equations (Schenck et al., "Learning
the RoPEs: Better 2D and 3D Position Encodings with STRING", ICML 2025), computed densely in float64 here.

No reference code exists: the paper publishes none, and searches of public code (GitHub repositories and code
for "Cayley-STRING", "Circulant-STRING", "Learning the RoPEs", issues for an official release) found only third-party
re-implementations. So this file computes the paper's definition directly: token n at position x_n gets

    R(x_n) = exp(sum_i x_n,i L_i)     (torch.linalg.matrix_exp of the dense d x d generators, per head)

with commuting skew generators L_i, and every logit is (R(x_m) q_m) . (R(x_n) k_n). Cayley-STRING:
L_i = P J_i P^T, P = (I - S)(I + S)^-1 (an explicit inverse here), S = A - A^T, J_i RoPE's generator (pair j =
channels 2j, 2j + 1 turning at rate f[i, j]: [[0, -f], [f, 0]]). Circulant-STRING: L_i = C_i - C_i^T with C_i the
circulant matrix of first column c_i, C_i[a, b] = c_i[(a - b) mod d]. Learned parameters (A, the frequencies, the
coefficients) are drawn here and set into vispe's modules. Prefix tokens: unrotated on images (x = 0), at their
sample's centroid on points (vispe's documented defaults).
"""

from __future__ import annotations

import pytest
import torch

from vispe import build_encoding
from vispe.positions import Positions, grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('string_cayley', 'string_circulant')

HEADS, HEAD_DIM = 2, 16


def rope_generator(freqs: torch.Tensor) -> torch.Tensor:
    """J for pair rates (..., d/2): (..., d, d) block diagonal, block j = [[0, -f_j], [f_j, 0]]."""
    d = 2 * freqs.shape[-1]
    out = freqs.new_zeros(*freqs.shape[:-1], d, d)
    j = torch.arange(d // 2)
    out[..., 2 * j + 1, 2 * j] = freqs
    out[..., 2 * j, 2 * j + 1] = -freqs
    return out


def circulant(c: torch.Tensor) -> torch.Tensor:
    """The circulant matrices of first columns c (..., d): C[a, b] = c[(a - b) mod d]."""
    d = c.shape[-1]
    return c[..., (torch.arange(d)[:, None] - torch.arange(d)[None, :]) % d]


def paper_logits(gens: torch.Tensor, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(R(x_m) q_m) . (R(x_n) k_n) for generators (ndim, H, d, d), positions (N, ndim), q, k (1, H, N, d), float64."""
    rot = torch.linalg.matrix_exp(torch.einsum('ni,ihab->hnab', x, gens).contiguous())  # (H, N, d, d)
    qr, kr = torch.einsum('hnab,xhnb->xhna', rot, q), torch.einsum('hnab,xhnb->xhna', rot, k)
    return qr @ kr.transpose(-1, -2)


def setup(name: str, ndim: int, **options) -> tuple[torch.nn.Module, torch.Tensor, Positions, torch.Tensor]:
    """The module with drawn parameters, its dense float64 generators (ndim, H, d, d), the positions and their
    coordinates per token (prefix included) as the paper's x."""
    generator = torch.Generator().manual_seed(ndim)
    enc = build_encoding({'type': name, **options}, dim=HEADS * HEAD_DIM, num_heads=HEADS, ndim=ndim, grid_size=None)
    with torch.no_grad():
        if name == 'string_cayley':
            enc.A.copy_(torch.randn(enc.A.shape, generator=generator) * 0.3)
            a = enc.A.double()
            s = a - a.transpose(-1, -2)
            eye = torch.eye(HEAD_DIM, dtype=torch.float64)
            p = (eye - s) @ torch.linalg.inv(eye + s)  # (H, d, d)
            j = rope_generator(enc.freqs.double()).expand(ndim, HEADS, -1, -1)
            gens = p @ j @ p.transpose(-1, -2)
        else:
            if isinstance(enc.coeffs, torch.nn.Parameter):
                enc.coeffs.copy_(torch.randn(enc.coeffs.shape, generator=generator) * 0.3)
            c = circulant(enc.coeffs.double()).expand(ndim, HEADS, -1, -1)
            gens = c - c.transpose(-1, -2)
    if ndim == 2:
        pos = grid_positions(3, 4, num_prefix=1)
        x = torch.cat([torch.zeros(1, 2), pos.coords.double()])  # the cls token unrotated
    else:
        points = torch.randn(10, 3, generator=generator, dtype=torch.float64) * 0.5
        pos = Positions(points.float(), num_prefix=1)
        x = torch.cat([pos.coords.double().mean(0, keepdim=True), pos.coords.double()])  # cls at the centroid
    return enc, gens, pos, x


CASES = [
    ('string_cayley', 2, {}),
    ('string_cayley', 2, {'frequencies': 'axial'}),
    ('string_cayley', 3, {}),
    ('string_circulant', 2, {}),
    ('string_circulant', 2, {'frequencies': 'axial'}),
    ('string_circulant', 3, {}),
]


@pytest.mark.parametrize(('name', 'ndim', 'options'), CASES)
def test_string_logits_match_the_papers_equation(name, ndim, options) -> None:
    """Every logit, prefix rows and columns included, against exp(sum_i x_i L_i) in float64: to float32 rounding
    (vispe's angles and its change of basis are float32)."""
    enc, gens, pos, x = setup(name, ndim, **options)
    generator = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, HEADS, x.shape[0], HEAD_DIM, generator=generator, dtype=torch.float64) for _ in range(2))
    theirs = paper_logits(gens, x, q, k)
    q2, k2 = enc.rotate(q, k, pos)
    ours = q2 @ k2.transpose(-1, -2)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)
    # the generators turn q and k far from where they were, so the comparison can fail
    assert (theirs - q @ k.transpose(-1, -2)).abs().max() > 1.0


def test_string_generators_commute() -> None:
    """The paper's condition for translation invariance, on the generators as defined above."""
    for name in METHODS:
        _, gens, _, _ = setup(name, 3)
        for i in range(3):
            for j in range(i):
                torch.testing.assert_close(gens[i] @ gens[j], gens[j] @ gens[i], atol=1e-10, rtol=0)
