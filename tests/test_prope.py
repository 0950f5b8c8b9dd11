"""PRoPE: parity with the authors' attention (liruilong940607/prope, prope/torch.py) on equal inputs, and the
properties the paper claims: only relative projective transforms matter (invariance to the world frame), one view
is RoPE on half the channels, and the intrinsics enter through K normalised by the image size."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_camera_encodings import B, H, P, V, W, attention, positions, scene

from vispe import build_encoding, list_encodings
from vispe import geometry as G
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.encodings.prope import PRoPE, lift, normalized_intrinsics
from vispe.kernels.rotary import cos_sin_table, rotate_pairs
from vispe.positions import Cameras, Positions, grid_coords


# --- the reference's attention, re-derived here from the paper and the conventions of its code ----------------------
def reference_rope(x, coord, inverse=False):
    """The reference's RoPE on one d/4 block: channel j paired with j + n (n = d/8), turned by -angle (by +angle
    when ``inverse``), angle = coord * 100^(-j/n)."""
    n = x.shape[-1] // 2
    angle = coord[:, None].float() * 100.0 ** (-torch.arange(n) / n)
    cos, sin = angle.cos(), angle.sin() * (-1 if inverse else 1)
    a, b = x[..., :n], x[..., n:]
    return torch.cat([cos * a + sin * b, -sin * a + cos * b], dim=-1)


def reference_attention(q, k, v, world_to_cam, K, grid, image_size):
    """Self-attention of V views' tokens (view-major, row-major within a view): the first d/2 channels in
    4-vectors by P^T (q), P^-1 (k, v) and P (output), P = lift(K') E; then RoPE of the column index on d/4
    channels and of the row index on the last d/4."""
    (h, w), d = grid, q.shape[-1]
    k_norm = normalized_intrinsics(K, image_size)
    proj = lift(k_norm) @ world_to_cam  # (B, V, 4, 4)
    inv = torch.linalg.inv(world_to_cam) @ lift(torch.linalg.inv(k_norm))
    view = torch.arange(world_to_cam.shape[1]).repeat_interleave(h * w)
    rows = torch.arange(h).repeat_interleave(w).repeat(len(view) // (h * w))
    cols = torch.arange(w).repeat(len(view) // w)

    def apply(x, mats, inverse=False):
        blocks = x[..., : d // 2].unflatten(-1, (-1, 4))  # (B, heads, N, d/8, 4)
        head = torch.einsum('bnij,bhnkj->bhnki', mats[:, view], blocks).flatten(-2)
        xs = reference_rope(x[..., d // 2 : 3 * d // 4], cols, inverse)
        ys = reference_rope(x[..., 3 * d // 4 :], rows, inverse)
        return torch.cat([head, xs, ys], dim=-1)

    out = F.scaled_dot_product_attention(apply(q, proj.transpose(-1, -2)), apply(k, inv), apply(v, inv))
    return apply(out, proj, inverse=True)


def reference_to_vispe(d: int) -> torch.Tensor:
    """vispe's channel c holds the reference's channel index[c]: projective half as it is; in each d/4 RoPE block,
    reference pair (j, j + n) is vispe's (2j + 1, 2j)."""
    n, index = d // 8, list(range(d // 2))
    for start in (d // 2, 3 * d // 4):
        for j in range(n):
            index += [start + n + j, start + j]
    return torch.tensor(index)


def vispe_attention(enc, q, k, v, pos):
    qr, kr = enc.rotate(q, k, pos)
    return enc.transform_out(F.scaled_dot_product_attention(qr, kr, enc.transform_v(v, pos)), pos)


@pytest.mark.parametrize('head_dim', [16, 32])
def test_equals_the_reference_on_equal_inputs(head_dim: int) -> None:
    """Random q, k, v over three views with different focal lengths, principal points and poses: vispe's output,
    with the reference's channels permuted in and out (module doc), equals the reference's."""
    _, K, poses, _ = scene()
    K = K.clone()
    K[..., 0, 2] += torch.tensor([0.0, 1.5, -2.0])  # off-centre principal points
    K[..., 1, 1] *= torch.tensor([1.0, 1.2, 0.9])  # non-square pixels
    heads, pos = 2, positions(K, poses)
    enc = PRoPE(heads * head_dim, heads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, heads, pos.num_tokens, head_dim, generator=g) for _ in range(3))
    expected = reference_attention(q, k, v, torch.linalg.inv(poses), K, (H // P, W // P), (H, W))
    index = reference_to_vispe(head_dim)
    out = vispe_attention(enc, q[..., index], k[..., index], v[..., index], pos)
    torch.testing.assert_close(out[..., torch.argsort(index)], expected, atol=1e-4, rtol=1e-4)


def test_attention_is_invariant_to_the_world_frame_and_sees_one_camera_move() -> None:
    _, K, poses, frame = scene()
    attn = attention('prope')
    x = torch.randn(B, V * (H // P) * (W // P), 64)
    out = attn(x, positions(K, poses))
    torch.testing.assert_close(attn(x, positions(K, frame @ poses)), out, atol=1e-4, rtol=1e-4)
    moved = poses.clone()
    moved[:, 1, :3, 3] += torch.tensor([0.3, 0.0, 0.0])
    assert not torch.allclose(attn(x, positions(K, moved)), out, atol=1e-3)
    zoomed = K.clone()
    zoomed[:, 1, :2, :2] *= 1.5  # one camera's focal length: PRoPE sees it, the pose-only form does not
    assert not torch.allclose(attn(x, positions(zoomed, poses)), out, atol=1e-3)
    pose_only = attention(dict(type='prope', intrinsics=False))
    torch.testing.assert_close(
        pose_only(x, positions(zoomed, poses)), pose_only(x, positions(K, poses)), atol=1e-5, rtol=1e-5
    )


def test_one_view_is_rope_on_half_the_channels() -> None:
    """Within one view P_q P_k^-1 = I: the projective half attends unencoded, the other half as RoPE, with its
    values turned too and the output turned back (GTA's and the reference's value transform)."""
    g = torch.Generator().manual_seed(1)
    K = G.intrinsics(torch.tensor([[25.0]]), H, W)
    pose = G.look_at(torch.tensor([[[2.0, -1.0, 3.0]]]), torch.zeros(1, 1, 3))
    h, w = H // P, W // P
    pos = Positions(grid_coords(h, w), cameras=Cameras(K, pose, torch.zeros(h * w, dtype=torch.long), (H, W), P))
    enc = PRoPE(64, 2)
    q, k, v = (torch.randn(1, 2, h * w, 32, generator=g) for _ in range(3))
    table = cos_sin_table(torch.cat([grid_coords(h, w)[:, 1:] * enc.freqs, grid_coords(h, w)[:, :1] * enc.freqs], -1))

    def half_rope(x, inverse=False):
        return torch.cat([x[..., :16], rotate_pairs(x[..., 16:], table, inverse=inverse)], dim=-1)

    expected = half_rope(F.scaled_dot_product_attention(half_rope(q), half_rope(k), half_rope(v)), inverse=True)
    torch.testing.assert_close(vispe_attention(enc, q, k, v, pos), expected, atol=1e-4, rtol=1e-4)


def test_normalised_intrinsics_are_the_same_for_one_field_of_view_at_any_image_size() -> None:
    fov = math.radians(60.0)
    small, large = ((s / 2) / math.tan(fov / 2) for s in (32, 96))
    k_small = normalized_intrinsics(G.intrinsics(torch.tensor(small), 32, 32), (32, 32))
    k_large = normalized_intrinsics(G.intrinsics(torch.tensor(large), 96, 96), (96, 96))
    torch.testing.assert_close(k_small, k_large)
    assert k_small[0, 2] == 0 and k_small[1, 2] == 0  # a centred camera: principal point at 0


def test_registered_for_the_multiview_transformer_and_refuses_a_head_dim_it_cannot_split() -> None:
    assert 'prope' in list_encodings(ndim=2, cameras=True) and 'prope' not in list_encodings(ndim=2)
    assert 'prope' in multiview_encodings()
    assert build_encoding('prope', dim=64, num_heads=2).no_weight_decay() == set()
    with pytest.raises(ValueError, match='prope .* head dim must divide by 8, got 12'):
        PRoPE(24, 2)
    images, K, poses, _ = scene()
    model = MultiViewTransformer(encoding='prope', img_size=(H, W), patch_size=P, embed_dim=32, depth=2, num_heads=2)
    out = model(images, K, poses)
    out.square().sum().backward()
    assert torch.isfinite(out).all() and model.head.weight.grad.abs().sum() > 0
    assert model(images[:, :2], K[:, :2], poses[:, :2]).shape == out.shape  # fewer views than it was built with
