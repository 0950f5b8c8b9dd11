"""HARoPE: plain RoPE at init, relative after training, closed-form inverse, exp, strategies inherited."""

import pytest
import torch

import vispe
from vispe.encodings.block_rotations import expm
from vispe.positions import Positions, grid_positions


def build(randomize=True, **context):
    enc = vispe.build_encoding('harope', **{'dim': 64, 'num_heads': 4, **context})
    if randomize:  # a trained-looking state: far from the identity
        for p in (enc.A_u, enc.A_v, enc.sigma):
            torch.nn.init.normal_(p, std=0.3)
    return enc


def logits(enc, q, k, pos):
    q2, k2 = enc.rotate(q, k, pos)
    return q2 @ k2.transpose(-1, -2)


def test_at_init_it_is_rope_axial_with_theta_10000():
    enc = build(randomize=False)
    rope = vispe.build_encoding({'type': 'rope_axial', 'theta': 10000.0}, dim=64, num_heads=4)
    q, k = torch.randn(2, 4, 1 + 12, 16), torch.randn(2, 4, 1 + 12, 16)
    pos = grid_positions(3, 4, num_prefix=1)
    for got, want in zip(enc.rotate(q, k, pos), rope.rotate(q, k, pos)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)  # M = I up to the 1e-6 in s


def test_gradients_reach_every_parameter_at_init():
    enc = build(randomize=False)
    q, k = torch.randn(1, 4, 12, 16), torch.randn(1, 4, 12, 16)
    logits(enc, q, k, grid_positions(3, 4)).square().sum().backward()
    for p in (enc.A_u, enc.A_v, enc.sigma):
        assert p.grad.abs().sum() > 0


def test_patch_logits_stay_relative_after_training():
    enc = build()
    q, k = torch.randn(2, 4, 1 + 12, 16), torch.randn(2, 4, 1 + 12, 16)
    base = grid_positions(3, 4, num_prefix=1)
    ref = logits(enc, q, k, base)[..., 1:, 1:]
    for offset in ([3.0, -7.0], [0.25, 11.5]):
        shifted = Positions(base.coords + torch.tensor(offset), grid=(3, 4), num_prefix=1)
        torch.testing.assert_close(logits(enc, q, k, shifted)[..., 1:, 1:], ref, atol=1e-4, rtol=1e-4)
    scaled = Positions(base.coords * 2, grid=(3, 4), num_prefix=1)
    assert (logits(enc, q, k, scaled)[..., 1:, 1:] - ref).abs().max() > 1e-2
    # the mixing matters: plain RoPE gives other logits
    plain = vispe.build_encoding({'type': 'rope_axial', 'theta': 10000.0}, dim=64, num_heads=4)
    assert (logits(plain, q, k, base)[..., 1:, 1:] - ref).abs().max() > 1e-1


def test_mixing_has_a_closed_form_inverse_and_keeps_prefix_scores():
    enc = build()
    m, m_inv_t = enc.mixing()  # (H, d, d)
    torch.testing.assert_close(m @ m_inv_t.transpose(-1, -2), torch.eye(16).expand(4, 16, 16), atol=1e-4, rtol=0)
    assert (m - torch.eye(16)).abs().max() > 0.1
    u, v, _ = enc.factors()
    torch.testing.assert_close(u @ u.transpose(-1, -2), torch.eye(16).expand(4, 16, 16), atol=1e-5, rtol=0)
    # prefix tokens go through M and M^-T too: their scores with each other are unchanged
    q, k = torch.randn(2, 4, 2 + 9, 16), torch.randn(2, 4, 2 + 9, 16)
    scores = logits(enc, q, k, grid_positions(3, 3, num_prefix=2))
    torch.testing.assert_close(scores[..., :2, :2], (q @ k.transpose(-1, -2))[..., :2, :2], atol=1e-4, rtol=1e-4)


def test_generator_scale_multiplies_the_skew_generators():
    """generator_scale g: U = exp(g (A_u - A_u^T)); g = 0.5 with A equals g = 1 with A / 2 (the authors' code's
    (A - A^T) / 2)."""
    enc = build()
    half = build(randomize=False, generator_scale=0.5)
    with torch.no_grad():
        for name in ('A_u', 'A_v', 'sigma'):
            getattr(half, name).copy_(getattr(enc, name) * (2.0 if name != 'sigma' else 1.0))
    for got, want in zip(half.mixing(), enc.mixing()):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    a = enc.A_u.detach()
    torch.testing.assert_close(enc.factors()[0], torch.linalg.matrix_exp(a - a.transpose(-1, -2)), atol=1e-5, rtol=0)
    for bad in (0.0, -1.0, True, 'half'):
        with pytest.raises(ValueError, match='generator_scale'):
            build(generator_scale=bad)


@pytest.mark.parametrize('std', [0.0, 0.01, 0.3, 3.0])
def test_expm_matches_matrix_exp(std):
    a = torch.randn(6, 16, 16, dtype=torch.float64) * std
    a = a - a.transpose(-1, -2)
    torch.testing.assert_close(expm(a.float()).double(), torch.linalg.matrix_exp(a), atol=2e-5, rtol=0)


def test_resolution_strategies_come_from_rope_axial():
    enc = build(grid_size=(3, 4))
    q, k = torch.randn(1, 4, 36, 16), torch.randn(1, 4, 36, 16)
    pos = grid_positions(6, 6)
    none = enc.rotate(q, k, pos)[0]
    enc.strategy = 'ntk'
    assert (enc.rotate(q, k, pos)[0] - none).abs().max() > 1e-3


def test_runs_in_a_vit_at_two_resolutions():
    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding='harope', img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
        num_classes=5,
    )  # fmt: skip
    for size in [(32, 32), (48, 64)]:
        out = model(torch.randn(2, 3, *size))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.sum().backward()
    assert model.blocks[0].attn.pe['harope'].A_u.grad.abs().sum() > 0
