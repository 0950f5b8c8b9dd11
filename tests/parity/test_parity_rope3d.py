"""Parity of ``rope3d`` (rotary embedding on point positions) with its equation, computed densely in float64 here.

rope3d names no outside reference: its docstring defines it as vispe's ``rope_axial`` / ``rope_mixed`` (RoPE-ViT's
axial and mixed RoPE, Heo et al. 2024, whose code, naver-ai/rope-vit, is 2D only) carried to (x, y, z) in the data's
unit, with a ``freq_scale`` in rad per unit and the cls token at the cloud's centroid. So this file computes that
definition directly: with P = d // (2 ndim) pairs per axis, pair j = a P + i (i < P) of every head turns by

    axial: x_a * freq_scale / theta^(i / P)        mixed: sum_a x_a f[a, h, j]  (learned f)

and the pairs from ndim P on by 0; pair j is channels (2j, 2j + 1) turned by [[cos, -sin], [sin, cos]]. Every logit
is (R(x_m) q_m) . (R(x_n) k_n), the cls token at the mean of its cloud's points (``prefix='centroid'``, the default)
or unrotated (``prefix='none'``).
"""

from __future__ import annotations

import pytest
import torch

from vispe import build_encoding
from vispe.positions import Positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('rope3d',)

HEADS = 2


def rotations(angles: torch.Tensor) -> torch.Tensor:
    """Block-diagonal rotations (..., d, d) for pair angles (..., d/2), pair j on channels 2j, 2j + 1."""
    d = 2 * angles.shape[-1]
    out = angles.new_zeros(*angles.shape[:-1], d, d)
    j = torch.arange(d // 2)
    cos, sin = angles.cos(), angles.sin()
    out[..., 2 * j, 2 * j], out[..., 2 * j, 2 * j + 1] = cos, -sin
    out[..., 2 * j + 1, 2 * j], out[..., 2 * j + 1, 2 * j + 1] = sin, cos
    return out


def axial_rates(head_dim: int, ndim: int, theta: float, freq_scale: float) -> torch.Tensor:
    """(ndim, d/2) float64: pair a P + i turns with axis a at freq_scale / theta^(i / P); the rest at 0."""
    per_axis = head_dim // (2 * ndim)
    rates = torch.zeros(ndim, head_dim // 2, dtype=torch.float64)
    ladder = freq_scale / theta ** (torch.arange(per_axis, dtype=torch.float64) / per_axis)
    for a in range(ndim):
        rates[a, a * per_axis : (a + 1) * per_axis] = ladder
    return rates


def equation_logits(rates: torch.Tensor, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """rates (ndim, H or 1, d/2), positions x (N, ndim), q, k (1, H, N, d): float64 logits (1, H, N, N)."""
    angles = torch.einsum('na,ahj->hnj', x, rates)  # (H or 1, N, d/2)
    rot = rotations(angles)
    qr, kr = torch.einsum('hnab,xhnb->xhna', rot, q), torch.einsum('hnab,xhnb->xhna', rot, k)
    return qr @ kr.transpose(-1, -2)


def cloud(prefix: str) -> tuple[Positions, torch.Tensor]:
    """Ten points of about unit size, one cls token; x per token, cls first (centroid or unrotated)."""
    points = torch.randn(10, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.3
    pos = Positions(points.float(), num_prefix=1)
    coords = pos.coords.double()
    cls = coords.mean(0, keepdim=True) if prefix == 'centroid' else torch.zeros(1, 3, dtype=torch.float64)
    return pos, torch.cat([cls, coords])


def qk(head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(1, HEADS, 11, head_dim, generator=generator, dtype=torch.float64) for _ in range(2))


@pytest.mark.parametrize('prefix', ['centroid', 'none'])
@pytest.mark.parametrize('head_dim', [16, 24])
def test_rope3d_axial_matches_its_equation(head_dim, prefix) -> None:
    """The defaults (axial, theta 100, freq_scale 8): every logit to float32 rounding (vispe's angles are float32).
    A head dim of 16 leaves 2 of its 8 pairs unrotated (16 // 6 = 2 pairs per axis)."""
    enc = build_encoding({'type': 'rope3d', 'prefix': prefix}, dim=HEADS * head_dim, num_heads=HEADS, ndim=3)
    pos, x = cloud(prefix)
    q, k = qk(head_dim)
    theirs = equation_logits(axial_rates(head_dim, 3, 100.0, 8.0)[:, None], x, q, k)
    q2, k2 = enc.rotate(q, k, pos)
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2), theirs, atol=2e-5, rtol=1e-5)
    assert (theirs - q @ k.transpose(-1, -2)).abs().max() > 1.0  # the rotation matters, so the check can fail


def test_rope3d_mixed_matches_its_equation() -> None:
    """Learned frequency vectors per head (drawn here): angle sum_a x_a f[a, h, j]."""
    head_dim = 24
    enc = build_encoding({'type': 'rope3d', 'mode': 'mixed'}, dim=HEADS * head_dim, num_heads=HEADS, ndim=3)
    with torch.no_grad():
        enc.freqs.copy_(torch.randn(enc.freqs.shape, generator=torch.Generator().manual_seed(2)) * 4)
    pos, x = cloud('centroid')
    q, k = qk(head_dim)
    theirs = equation_logits(enc.freqs.detach().double(), x, q, k)
    q2, k2 = enc.rotate(q, k, pos)
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2), theirs, atol=2e-5, rtol=1e-5)
