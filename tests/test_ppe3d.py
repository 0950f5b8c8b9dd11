"""3DPPE (``3dppe``): each token's point lies on its ray at its depth (it projects back to its patch centre), the
point and the sinusoid match the reference's formulas (drilistbox/3DPPE, PETRDepthHeadV2.position_embeding and
pos2posemb3d, re-derived here), the depth head learns from the depth maps through ``loss_depth``, and the task
adds that loss to its own."""

from __future__ import annotations

import math

import pytest
import torch
from test_camera_encodings import B, H, P, V, W, positions, scene

from vispe import build_encoding
from vispe import geometry as G
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.encodings.ppe3d import PPE3D, sine_embedding_3d
from vispe.positions import Cameras, Positions
from vispe.tasks.localization import MultiViewLocalizer

h, w = H // P, W // P


def with_depth(pos: Positions, depth: torch.Tensor) -> Positions:
    """``pos`` whose cameras carry per-token depths (B, V, h, w)."""
    c = pos.cameras
    assert c is not None
    cameras = Cameras(c.K, c.cam_to_world, c.view, c.image_size, c.patch_size, depth=depth)
    return Positions(pos.coords, num_prefix=pos.num_prefix, cameras=cameras, key=pos.key)


def test_each_point_projects_back_to_its_patch_centre_at_its_depth() -> None:
    _, K, poses, _ = scene()
    depth = 1.0 + 4.0 * torch.rand(B, V, h, w)
    enc = PPE3D(32, depth_source='gt')
    points = enc.points(positions(K, poses), depth.flatten(1)).reshape(B, V, h * w, 3)
    uv, z = G.project(K, poses, points)
    torch.testing.assert_close(uv, G.pixel_centres(h, w, stride=P).expand(B, V, -1, -1), atol=1e-3, rtol=0)
    torch.testing.assert_close(z, depth.reshape(B, V, -1), atol=1e-4, rtol=1e-5)


def test_points_equal_the_references_image_to_world_formula() -> None:
    """The reference takes p = (lift(K) E)^-1 (u d, v d, d, 1) with E world-to-camera (its img2lidar)."""
    _, K, poses, _ = scene()
    depth = 0.5 + 6.0 * torch.rand(B, V, h * w)
    lidar2img = torch.zeros(B, V, 4, 4)
    lidar2img[..., :3, :3], lidar2img[..., 3, 3] = K, 1.0
    img2world = torch.linalg.inv(lidar2img @ torch.linalg.inv(poses))
    uv = G.pixel_centres(h, w, stride=P)
    homogeneous = torch.cat([uv * depth[..., None], depth[..., None], torch.ones_like(depth[..., None])], dim=-1)
    expected = (img2world[:, :, None] @ homogeneous[..., None])[..., :3, 0]
    got = PPE3D(32, depth_source='gt').points(positions(K, poses), depth.flatten(1))
    torch.testing.assert_close(got, expected.reshape(B, -1, 3), atol=1e-4, rtol=1e-4)


def test_the_sinusoid_is_the_references_interleaved_one_in_y_x_z_order() -> None:
    points = torch.rand(5, 3)
    F = 8
    got = sine_embedding_3d(points, F)
    for n in range(5):
        for slot, axis in enumerate((1, 0, 2)):
            for i in range(F):
                angle = 2 * math.pi * points[n, axis].item() / 10000 ** (2 * (i // 2) / F)
                want = math.sin(angle) if i % 2 == 0 else math.cos(angle)
                assert got[n, slot * F + i].item() == pytest.approx(want, abs=1e-5)


def test_relative_points_ignore_the_world_frame_and_absolute_ones_do_not() -> None:
    _, K, poses, frame = scene()
    depth = 1.0 + 4.0 * torch.rand(B, V, h, w)
    x = torch.randn(B, V * h * w, 32)
    for relative in (True, False):
        torch.manual_seed(0)
        enc = build_encoding(dict(type='3dppe', depth_source='gt', relative=relative), dim=32)
        out = enc.embed(x, with_depth(positions(K, poses), depth))
        moved = enc.embed(x, with_depth(positions(K, frame @ poses), depth))
        assert torch.allclose(out, moved, atol=1e-4) == relative


def test_the_depth_loss_is_smooth_l1_over_the_tokens_with_a_surface_in_range() -> None:
    _, K, poses, _ = scene()
    torch.manual_seed(0)
    enc = PPE3D(32, depth_range=(1.0, 8.0))
    target = 1.0 + 6.0 * torch.rand(B, V, h, w)
    target[0, 0, 0, :] = 0.0  # no surface: left out
    target[1, 1, 1, :] = 20.0  # beyond the bins: left out
    x = torch.randn(B, V * h * w, 32)
    pos = with_depth(positions(K, poses), target)
    predicted = enc.token_depth(x, pos)
    flat = target.flatten(1)
    valid = (flat >= 1.0) & (flat <= 8.0)
    expected = torch.nn.functional.smooth_l1_loss(predicted[valid], flat[valid], beta=1 / 9)
    torch.testing.assert_close(pos.aux_losses['loss_depth'], expected)
    assert ((predicted >= 1.0) & (predicted <= 8.0)).all()  # an expectation over the bins
    no_maps = positions(K, poses)
    enc.token_depth(x, no_maps)
    assert not no_maps.aux_losses  # without depth maps: nothing to learn from, nothing recorded


def test_the_depth_head_learns_the_surface_depth() -> None:
    """A token's depth is a function of its patch here (patch embedding = a code of its depth): the head learns
    it from loss_depth alone."""
    _, K, poses, _ = scene()
    torch.manual_seed(0)
    enc = PPE3D(32)
    target = 1.0 + 6.0 * torch.rand(B, V, h, w)
    code = torch.nn.Linear(1, 32)
    x = torch.tanh(code(target.reshape(B, -1, 1))).detach()
    pos = with_depth(positions(K, poses), target)
    opt = torch.optim.Adam(enc.depth_head.parameters(), lr=1e-2)
    first = None
    for _ in range(150):
        pos.aux_losses.clear()
        enc.token_depth(x, pos)
        loss = pos.aux_losses['loss_depth']
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2 * first, (first, loss.item())


def test_the_backbone_pools_depth_per_patch_and_the_task_adds_the_depth_loss() -> None:
    images, K, poses, _ = scene()
    depth = torch.zeros(B, V, 1, H, W)
    depth[..., :P, :P] = torch.tensor([[3.0, 2.0, 0.0, 5.0]]).repeat(P, 1)  # patch (0, 0): nearest surface 2.0
    model = MultiViewTransformer(encoding='3dppe', img_size=(H, W), patch_size=P, embed_dim=32, depth=1, num_heads=2)
    tokens = model.token_depth(depth, images.shape)
    assert tokens.shape == (B, V, h, w) and (tokens[..., 0, 0] == 2.0).all() and (tokens.flatten(2)[..., 1:] == 0).all()
    with pytest.raises(ValueError, match=r'depth maps must be \(B, V, 1, H, W\)'):
        model.token_depth(depth[..., :-1], images.shape)
    localizer = MultiViewLocalizer(
        backbone=dict(
            type='MultiViewTransformer',
            encoding='3dppe',
            img_size=(H, W),
            patch_size=P,
            embed_dim=32,
            depth=1,
            num_heads=2,
        )
    )
    maps = 1.0 + 5.0 * torch.rand(B, V, 1, H, W)
    losses = localizer(images, K, poses, target=torch.zeros(B, 3), mode='loss', depth=maps)
    assert set(losses) == {'loss', 'loss_depth'} and losses['loss_depth'] > 0
    assert set(localizer(images, K, poses, target=torch.zeros(B, 3), mode='loss')) == {'loss'}  # no maps, no loss


def test_registered_for_the_multiview_transformer_and_gt_depth_needs_the_maps() -> None:
    assert '3dppe' in multiview_encodings()
    images, K, poses, _ = scene()
    model = MultiViewTransformer(
        encoding=dict(type='3dppe', depth_source='gt'),
        img_size=(H, W),
        patch_size=P,
        embed_dim=32,
        depth=1,
        num_heads=2,
    )
    with pytest.raises(ValueError, match="depth_source='gt' needs the views' depth maps: pass depth="):
        model(images, K, poses)
    assert model(images, K, poses, torch.rand(B, V, 1, H, W) * 4).shape == (B, 3)
    with pytest.raises(ValueError, match="3dppe depth_source is one of \\('predicted', 'gt'\\), got 'lidar'"):
        PPE3D(32, depth_source='lidar')
