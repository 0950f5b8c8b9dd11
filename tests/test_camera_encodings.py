"""Camera encodings (plucker, petr, gta) and the multi-view transformer: the properties ENCODINGS.md states."""

from __future__ import annotations

import pytest
import torch

from vispe import build_encoding, create_model, list_encodings
from vispe import geometry as G
from vispe.attention import Attention
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.encodings.gta import GTA
from vispe.encodings.petr import PETR
from vispe.encodings.rope import RoPEAxial
from vispe.positions import Cameras, Positions, grid_coords

B, V, H, W, P = 2, 3, 16, 24, 4


def scene(seed: int = 0):
    """Images, intrinsics and poses of V cameras around the origin, and a rigid change of world frame."""
    g = torch.Generator().manual_seed(seed)
    eye = torch.nn.functional.normalize(torch.randn(B, V, 3, generator=g), dim=-1) * 3.5
    poses = G.look_at(eye, 0.2 * torch.randn(B, V, 3, generator=g))
    K = G.intrinsics(20 + 10 * torch.rand(B, V, generator=g), H, W)
    frame = G.look_at(torch.tensor([1.0, -2.0, 0.7]), torch.tensor([0.3, 0.1, -0.2]))  # any rigid transform
    return torch.rand(B, V, 3, H, W, generator=g), K, poses, frame


def positions(K, poses, num_prefix: int = 0) -> Positions:
    h, w = H // P, W // P
    cameras = Cameras(K, poses, torch.arange(V).repeat_interleave(h * w), (H, W), P)
    return Positions(grid_coords(h, w).repeat(V, 1), num_prefix=num_prefix, cameras=cameras)


def attention(encoding, dim: int = 64, heads: int = 2, seed: int = 0) -> Attention:
    torch.manual_seed(seed)
    enc = build_encoding(encoding, dim=dim, num_heads=heads, ndim=2, patch_size=P)
    return Attention(dim, heads, qkv_bias=True, encodings={enc_name(encoding): enc}).eval()


def enc_name(spec) -> str:
    return spec if isinstance(spec, str) else spec['type']


def test_gta_attention_is_invariant_to_the_world_frame() -> None:
    _, K, poses, frame = scene()
    attn = attention(dict(type='gta', translation_scale=0.5))  # a large scale, so translations matter
    x = torch.randn(B, V * (H // P) * (W // P), 64)
    out = attn(x, positions(K, poses))
    assert torch.allclose(attn(x, positions(K, frame @ poses)), out, atol=1e-4)
    moved = poses.clone()
    moved[:, 1, :3, 3] += torch.tensor([0.5, 0.0, 0.0])  # one camera alone moves: the output must change
    assert not torch.allclose(attn(x, positions(K, moved)), out, atol=1e-3)


def test_gta_with_only_so2_blocks_and_plain_values_is_rope_axial() -> None:
    _, K, poses, _ = scene()
    pos = positions(K, poses, num_prefix=1)
    gta = GTA(64, 2, se3_fraction=0.0, transform_values=False)
    rope = RoPEAxial(64, 2, theta=100.0)
    q, k = torch.randn(B, 2, pos.num_tokens + 1, 32), torch.randn(B, 2, pos.num_tokens + 1, 32)
    for a, b in zip(gta.rotate(q, k, pos), rope.rotate(q, k, pos)):
        torch.testing.assert_close(a, b)
    v = torch.randn_like(q)
    assert torch.equal(gta.transform_v(v, pos), v) and torch.equal(gta.transform_out(v, pos), v)


def test_gta_channel_split_and_its_value_transforms_invert() -> None:
    _, K, poses, _ = scene()
    gta = GTA(96, 2)  # head dim 48: 24 camera channels (6 blocks), 24 rotated (6 pairs per axis)
    assert (gta.se3_dims, gta.so2_dims) == (24, 24) and gta.no_weight_decay() == {'translation_scale'}
    pos = positions(K, poses)
    v = torch.randn(B, 2, pos.num_tokens, 48)
    # transform_out undoes transform_v token by token (rho^-1 rho = 1)
    torch.testing.assert_close(gta.transform_out(gta.transform_v(v, pos), pos), v, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(gta.transform_v(v, pos), v, atol=1e-3)


def test_plucker_is_absolute_unless_relative_and_petr_is_absolute() -> None:
    images, K, poses, frame = scene()
    for spec, invariant in (('plucker', False), (dict(type='plucker', relative=True), True), ('petr', False)):
        torch.manual_seed(1)
        model = MultiViewTransformer(encoding=spec, img_size=(H, W), patch_size=P, embed_dim=32, depth=1, num_heads=2)
        model.eval()
        same = torch.allclose(model(images, K, frame @ poses), model(images, K, poses), atol=1e-4)
        assert same == invariant, spec


def test_plucker_rays_match_per_pixel_rays() -> None:
    _, K, poses, _ = scene()
    enc = build_encoding('plucker', dim=32, patch_size=P)
    rays = enc.rays(positions(K, poses))  # (B, V N, 6 P^2)
    assert rays.shape == (B, V * (H // P) * (W // P), 6 * P * P)
    # token 7 of view 2 = patch (1, 1): its pixel (row 5, col 6) is entry (1, 2) of the patch
    origin, direction = G.rays(K[:, 2], poses[:, 2], torch.tensor([[6.5, 5.5]]))
    expected = G.plucker(origin, direction)[:, 0]  # (B, 6)
    token = 2 * (H // P) * (W // P) + 1 * (W // P) + 1
    torch.testing.assert_close(rays[:, token].reshape(B, P * P, 6)[:, 1 * P + 2], expected)


def test_petr_frustum_points_come_back_to_their_pixels() -> None:
    _, K, poses, _ = scene()
    petr = PETR(32, num_depths=8, depth_range=(1.0, 4.0), scene_range=(-6, -6, -6, 6, 6, 6))
    coords = petr.frustum(positions(K, poses))  # inverse sigmoid of normalised points
    n = (H // P) * (W // P)
    points = torch.sigmoid(coords).reshape(B, V, n, 8, 3) * 12.0 - 6.0
    uv, depth = G.project(K, poses, points.reshape(B, V, -1, 3))
    centres = G.pixel_centres(H // P, W // P, stride=P)
    torch.testing.assert_close(
        uv.reshape(B, V, n, 8, 2), centres[None, None, :, None].expand(B, V, n, 8, 2), atol=1e-2, rtol=0
    )
    torch.testing.assert_close(depth.reshape(B, V, n, 8)[0, 0, 0], petr.depths, atol=1e-3, rtol=1e-3)


def test_petr_feature_guided_modulates_by_the_tokens() -> None:
    _, K, poses, _ = scene()
    torch.manual_seed(2)
    petr = PETR(32, num_depths=4, feature_guided=True)
    pos = positions(K, poses)
    x = torch.randn(B, pos.num_tokens, 32)
    pe = petr.embed(x, pos) - x
    assert not torch.allclose(petr.embed(2 * x, pos) - 2 * x, pe, atol=1e-4)


@pytest.mark.parametrize('encoding', ['plucker', 'petr', 'gta', ['plucker', 'rope_axial'], 'ape_learned', None])
def test_multiview_transformer_trains_with_each_encoding(encoding) -> None:
    images, K, poses, _ = scene()
    torch.manual_seed(3)
    model = MultiViewTransformer(encoding=encoding, img_size=(H, W), patch_size=P, embed_dim=32, depth=2, num_heads=2)
    out = model(images, K, poses)
    assert out.shape == (B, 3) and torch.isfinite(out).all()
    out.square().sum().backward()
    for name, p in model.named_parameters():
        if '.pe.' in f'.{name}' or name.startswith('pe.'):
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert torch.isfinite(model(images, K, poses).float()).all()
    assert model(images[:, :2], K[:, :2], poses[:, :2]).shape == (B, 3)  # fewer views
    assert model(torch.rand(B, V, 3, 24, 24), K, poses).shape == (B, 3)  # another image size


def test_camera_encodings_are_refused_where_there_are_no_cameras() -> None:
    assert {'plucker', 'petr', 'gta'} <= set(list_encodings(ndim=2, cameras=True))
    assert not {'plucker', 'petr', 'gta'} & set(list_encodings(ndim=2))
    assert {'gta', 'rope_axial', 'ape_learned'} <= set(multiview_encodings()) and 'peg' not in multiview_encodings()
    with pytest.raises(ValueError, match="'plucker' needs cameras"):
        create_model('vit_tiny_patch16_224', encoding='plucker', img_size=32, patch_size=8)
    with pytest.raises(ValueError, match='peg needs the tokens to form one image grid'):
        MultiViewTransformer(encoding='peg', embed_dim=32, depth=1, num_heads=2)
    with pytest.raises(ValueError, match=r"gta cannot be combined with \['rope_axial'\]"):
        MultiViewTransformer(encoding=['gta', 'rope_axial'], embed_dim=32, depth=1, num_heads=2)
    images, K, poses, _ = scene()
    model = MultiViewTransformer(encoding='gta', patch_size=P, embed_dim=32, depth=1, num_heads=2)
    with pytest.raises(ValueError, match='not divisible by the patch size 4'):
        model(torch.rand(B, V, 3, 18, 24), K, poses)
    with pytest.raises(ValueError, match=r'K must be \(2, 3, 3, 3\)'):
        model(images, K[:, :2], poses)
