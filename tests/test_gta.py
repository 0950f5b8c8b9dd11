"""gta's SO(2) variants: rope_axial's ladder on integer coordinates (default) and the authors' reference frequencies
2 pi 2^(j - n) on normalised patch centres (p + 0.5) / P."""

from __future__ import annotations

import math

import pytest
import torch

from vispe import geometry as G
from vispe.backbones.multiview import MultiViewTransformer
from vispe.encodings.gta import GTA
from vispe.positions import Cameras, Positions, grid_coords

PATCH = 4


def view_positions(h: int, w: int, views: int = 1, batch: int = 1, num_prefix: int = 0) -> Positions:
    """Positions of ``views`` views of an h x w token grid (identity intrinsics and poses: only SO(2) matters)."""
    K = G.intrinsics(torch.full((batch, views), 20.0), h * PATCH, w * PATCH)
    poses = torch.eye(4).expand(batch, views, 4, 4)
    cameras = Cameras(K, poses, torch.arange(views).repeat_interleave(h * w), (h * PATCH, w * PATCH), PATCH)
    return Positions(grid_coords(h, w).repeat(views, 1), num_prefix=num_prefix, cameras=cameras)


def rotate_by_hand(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x (..., N, 2 m) with channel pairs (2 i, 2 i + 1) rotated by [[cos, -sin], [sin, cos]] of angles (N, m)."""
    c, s = angles.cos(), angles.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([c * x0 - s * x1, s * x0 + c * x1], dim=-1).flatten(-2)


def test_reference_angles_match_the_formula_by_hand() -> None:
    h, w = 2, 3
    gta = GTA(16, 1, se3_fraction=0.0, transform_values=False, so2='reference')  # 8 pairs: 4 per axis
    assert (gta.se3_dims, gta.so2_dims) == (0, 16)
    n = 4
    omegas = [2 * math.pi * 2.0 ** (j - n) for j in range(1, n + 1)]  # 2 pi / 8, 2 pi / 4, 2 pi / 2, 2 pi
    angles = torch.tensor(
        [
            [om * (c + 0.5) / w for om in omegas] + [om * (r + 0.5) / h for om in omegas]  # col pairs, then rows
            for r in range(h)
            for c in range(w)
        ]
    )
    pos = view_positions(h, w)
    q, k = torch.randn(1, 1, h * w, 16), torch.randn(1, 1, h * w, 16)
    q2, k2 = gta.rotate(q, k, pos)
    torch.testing.assert_close(q2, rotate_by_hand(q, angles))
    torch.testing.assert_close(k2, rotate_by_hand(k, angles))
    # the logits see only the difference of the normalised positions: q_m . k_n = q . R((x_n - x_m) omega) k
    logits = q2 @ k2.transpose(-1, -2)
    rel = angles[None, :, :] - angles[:, None, :]  # (N, N, m): angle of key n minus angle of query m
    expected = torch.einsum('mc,mnc->mn', q[0, 0], rotate_by_hand(k[0, 0][None].expand(h * w, -1, -1), rel))
    torch.testing.assert_close(logits[0, 0], expected, atol=1e-5, rtol=1e-5)


def test_reference_angles_of_a_normalised_point_are_the_same_at_two_grid_sizes() -> None:
    """(p + 0.5) / P: token (1, 1) of a 3 x 3 grid and token (4, 4) of a 9 x 9 grid both sit at (0.5, 0.5)."""
    ref = GTA(64, 2, so2='reference')
    small, large = ref.so2_table(view_positions(3, 3)), ref.so2_table(view_positions(9, 9))
    torch.testing.assert_close(small[1 * 3 + 1], large[4 * 9 + 4])
    torch.testing.assert_close(small[0], large[1 * 9 + 1])  # (0.5 / 3) = (1.5 / 9) on both axes
    default = GTA(64, 2)  # rope_axial's ladder counts patches: the same point gets other angles
    assert not torch.allclose(default.so2_table(view_positions(3, 3))[4], default.so2_table(view_positions(9, 9))[40])
    # head dim 32: 16 camera channels, 4 pairs per axis; the highest frequency turns once across the image
    assert ref.freqs.tolist() == pytest.approx([2 * math.pi / 8, 2 * math.pi / 4, 2 * math.pi / 2, 2 * math.pi])


def test_reference_variant_keeps_prefix_tokens_and_value_transforms() -> None:
    pos = view_positions(3, 4, views=2, batch=2, num_prefix=1)
    gta = GTA(96, 2, so2='reference')
    v = torch.randn(2, 2, pos.num_tokens + 1, 48)
    torch.testing.assert_close(gta.transform_out(gta.transform_v(v, pos), pos), v, atol=1e-4, rtol=1e-4)
    q, k = torch.randn_like(v), torch.randn_like(v)
    q2, k2 = gta.rotate(q, k, pos)
    assert torch.equal(q2[:, :, 0], q[:, :, 0]) and torch.equal(k2[:, :, 0], k[:, :, 0])  # the prefix is untouched
    with pytest.raises(ValueError, match='so2 is one of'):
        GTA(64, 2, so2='fourier')


def test_reference_variant_trains_in_a_multiview_model_at_two_sizes() -> None:
    torch.manual_seed(0)
    spec = dict(type='gta', so2='reference')
    model = MultiViewTransformer(encoding=spec, img_size=(16, 24), patch_size=PATCH, embed_dim=32, depth=1, num_heads=2)
    K = G.intrinsics(torch.full((2, 2), 20.0), 16, 24)
    poses = G.look_at(torch.tensor([[[3.0, 0.0, 1.0], [0.0, 3.0, 1.0]]]).expand(2, 2, 3), torch.zeros(2, 2, 3))
    out = model(torch.rand(2, 2, 3, 16, 24), K, poses)
    assert out.shape == (2, 3) and torch.isfinite(out).all()
    out.square().sum().backward()
    scales = [p for n, p in model.named_parameters() if n.endswith('translation_scale')]  # one per attention layer
    assert scales and all(p.grad is not None and torch.isfinite(p.grad).all() for p in scales)
    assert torch.isfinite(model(torch.rand(2, 2, 3, 24, 36), K, poses)).all()  # a 1.5x grid: interpolated angles
