"""Camera geometry (vispe/geometry.py), OpenCV convention: rays, Plucker coordinates, frusta, poses."""

from __future__ import annotations

import torch

from vispe import geometry as G


def cameras(n: int = 3, seed: int = 0):
    """n cameras on a sphere of radius 2.5-4 looking at points near the origin, with focal lengths 20-40 px."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=-1)
    eye = direction * (2.5 + 1.5 * torch.rand(n, 1, generator=g))
    target = 0.2 * torch.randn(n, 3, generator=g)
    focal = 20 + 20 * torch.rand(n, generator=g)
    return G.intrinsics(focal, 24, 32), G.look_at(eye, target)


def test_pixel_and_patch_centres() -> None:
    uv = G.pixel_centres(2, 3)
    assert uv.tolist() == [[0.5, 0.5], [1.5, 0.5], [2.5, 0.5], [0.5, 1.5], [1.5, 1.5], [2.5, 1.5]]
    assert G.pixel_centres(2, 2, stride=8).tolist() == [[4, 4], [12, 4], [4, 12], [12, 12]]


def test_look_at_is_an_opencv_pose() -> None:
    K, pose = cameras()
    R = pose[:, :3, :3]
    assert torch.allclose(R.transpose(-1, -2) @ R, torch.eye(3).expand(3, 3, 3), atol=1e-5)
    assert torch.allclose(torch.linalg.det(R), torch.ones(3), atol=1e-5)
    # a point above the target (world +z) appears above the image centre (smaller v); the target is ahead (z > 0)
    eye, target = torch.tensor([[3.0, 0.0, 0.0]]), torch.zeros(1, 3)
    pose = G.look_at(eye, target)
    uv, depth = G.project(G.intrinsics(30.0, 24, 32)[None], pose, torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, 0.5]]]))
    assert torch.allclose(uv[0, 0], torch.tensor([16.0, 12.0])) and uv[0, 1, 1] < 12.0 and depth[0, 0] == 3.0


def test_rays_are_unit_start_at_the_camera_and_match_brute_force() -> None:
    K, pose = cameras()
    uv = G.pixel_centres(24, 32)
    origin, direction = G.rays(K, pose, uv)
    assert origin.shape == direction.shape == (3, 24 * 32, 3)
    assert torch.allclose(direction.norm(dim=-1), torch.ones(3, 24 * 32), atol=1e-5)
    assert torch.allclose(origin, pose[:, None, :3, 3].expand_as(origin))
    for c in range(3):  # brute force, one pixel at a time: d = normalise(R K^-1 [u, v, 1])
        for i in (0, 100, 767):
            pixel = torch.tensor([uv[i, 0], uv[i, 1], 1.0])
            d = pose[c, :3, :3] @ torch.linalg.solve(K[c], pixel)
            assert torch.allclose(direction[c, i], d / d.norm(), atol=1e-5)


def test_plucker_moment_is_the_same_for_every_point_on_a_ray() -> None:
    K, pose = cameras()
    origin, direction = G.rays(K, pose, G.pixel_centres(6, 8, stride=4))
    ray = G.plucker(origin, direction)
    for t in (-1.0, 0.7, 5.0):  # any point o + t d of the line gives the same coordinates
        assert torch.allclose(G.plucker(origin + t * direction, direction), ray, atol=1e-5)
    moment = ray[..., :3]
    assert torch.allclose((moment * direction).sum(-1), torch.zeros(3, 48), atol=1e-5)  # moment is orthogonal to d
    assert not torch.allclose(G.plucker(origin + torch.tensor([0.0, 0.0, 1.0]), direction), ray, atol=1e-3)


def test_frustum_points_project_back_onto_their_pixels() -> None:
    K, pose = cameras()
    uv = G.pixel_centres(6, 8, stride=4)
    depths = G.linear_increasing_depths(16, 1.0, 6.0)
    assert depths[0] == 1.0 and depths[-1] < 6.0 and (depths.diff() > 0).all() and (depths.diff().diff() > 0).all()
    points = G.frustum_points(K, pose, uv, depths)  # (3, 48, 16, 3)
    assert points.shape == (3, 48, 16, 3)
    back, z = G.project(K, pose, points.reshape(3, -1, 3))
    assert torch.allclose(back.reshape(3, 48, 16, 2), uv[None, :, None].expand(3, 48, 16, 2), atol=1e-3)
    assert torch.allclose(z.reshape(3, 48, 16), depths.expand(3, 48, 16), atol=1e-4)


def test_relative_poses_make_the_first_view_the_identity() -> None:
    _, pose = cameras(4)
    rel = G.relative_poses(pose[None])  # (1, 4, 4, 4)
    assert torch.allclose(rel[0, 0], torch.eye(4), atol=1e-5)
    assert torch.allclose(pose[0] @ rel[0, 2], pose[2], atol=1e-5)
    # the same rigid change of world frame on every camera leaves relative poses unchanged
    g = G.look_at(torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.0, 0.3, 0.0]))
    assert torch.allclose(G.relative_poses((g @ pose)[None]), rel, atol=1e-5)
