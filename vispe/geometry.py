"""Camera geometry for the camera encodings, on kornia, in one convention.

Convention (OpenCV), used everywhere in vispe:

- camera frame: x right, y down, z forward (the camera looks along +z);
- intrinsics ``K`` (..., 3, 3) in pixels: u = fx x / z + cx, v = fy y / z + cy, with (u, v) = (column, row) and the
  centre of pixel (row i, column j) at (u, v) = (j + 0.5, i + 0.5);
- poses ``cam_to_world`` (..., 4, 4): [R | t] maps camera-frame points to the world (t is the camera centre).
  Its inverse is world-to-camera (the extrinsic matrix).

Points, rays and frusta are computed with kornia's ``unproject_points``, ``project_points``, ``transform_points``,
``inverse_transformation`` and ``relative_transformation``; this file only arranges them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kornia.geometry.camera import project_points, unproject_points
from kornia.geometry.linalg import inverse_transformation, relative_transformation, transform_points
from torch import Tensor


def pixel_centres(h: int, w: int, stride: int = 1, device: torch.device | None = None) -> Tensor:
    """(h * w, 2) float32 (u, v) centres of an h x w grid of stride x stride cells, row-major: cell (i, j) has its
    centre at ((j + 0.5) stride, (i + 0.5) stride). stride 1: pixel centres; stride p: patch centres."""
    rows = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) * stride
    cols = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) * stride
    v, u = torch.meshgrid(rows, cols, indexing='ij')
    return torch.stack([u, v], dim=-1).reshape(-1, 2)


def patch_pixel_centres(h: int, w: int, patch: int, device: torch.device | None = None) -> Tensor:
    """(h * w, patch * patch, 2) (u, v) centres of the pixels of each patch of an h x w token grid, tokens
    row-major and pixels row-major within a patch."""
    pixels = pixel_centres(h * patch, w * patch, device=device).reshape(h, patch, w, patch, 2)
    return pixels.permute(0, 2, 1, 3, 4).reshape(h * w, patch * patch, 2)


def _expand_points(uv: Tensor, K: Tensor) -> Tensor:
    """uv (N, 2) or (..., N, 2) broadcast to K's leading dims (...): (..., N, 2)."""
    return uv.expand(*K.shape[:-2], *uv.shape[-2:]).to(K.dtype)


def camera_points(K: Tensor, uv: Tensor, depth: Tensor | float) -> Tensor:
    """Camera-frame points (..., N, 3) at pixel ``uv`` (N, 2) or (..., N, 2) and camera-frame depth z."""
    uv = _expand_points(uv, K)
    depth = torch.as_tensor(depth, dtype=K.dtype, device=K.device).expand(*uv.shape[:-1], 1)
    return unproject_points(uv, depth, K[..., None, :, :])


def rays(K: Tensor, cam_to_world: Tensor, uv: Tensor) -> tuple[Tensor, Tensor]:
    """World-frame rays through pixels ``uv``: origins (..., N, 3) (the camera centre) and unit directions
    (..., N, 3), d = normalise(R K^-1 [u, v, 1])."""
    on_plane = camera_points(K, uv, 1.0)  # z = 1: K^-1 [u, v, 1]
    pose = cam_to_world[..., None, :, :]
    origin = cam_to_world[..., None, :3, 3].expand_as(on_plane)
    direction = transform_points(pose, on_plane) - origin  # R K^-1 [u, v, 1]
    return origin, F.normalize(direction, dim=-1)


def plucker(origin: Tensor, direction: Tensor) -> Tensor:
    """Plucker coordinates (..., 6) = (o x d, d) of rays; the moment o x d is the same for every point on the ray."""
    return torch.cat([torch.linalg.cross(origin, direction, dim=-1), direction], dim=-1)


def linear_increasing_depths(num: int, near: float, far: float, device: torch.device | None = None) -> Tensor:
    """PETR's depth bins d_i = near + (far - near) i (i + 1) / (D (D + 1)), i = 0 .. D - 1 (denser near)."""
    i = torch.arange(num, device=device, dtype=torch.float32)
    return near + (far - near) * i * (i + 1) / (num * (num + 1))


def frustum_points(K: Tensor, cam_to_world: Tensor, uv: Tensor, depths: Tensor) -> Tensor:
    """World points (..., N, D, 3) of pixels ``uv`` back-projected at camera-frame depths ``depths`` (D,)."""
    cam = camera_points(K, uv, 1.0)[..., None, :] * depths.to(K.dtype)[:, None]  # (..., N, D, 3): z = depth
    pose = cam_to_world[..., None, None, :, :]
    return transform_points(pose, cam)


def project(K: Tensor, cam_to_world: Tensor, points: Tensor) -> tuple[Tensor, Tensor]:
    """Pixels (..., N, 2) and camera-frame depths (..., N) of world points (..., N, 3)."""
    world_to_cam = inverse_transformation(cam_to_world.reshape(-1, 4, 4)).reshape(cam_to_world.shape)  # kornia: N
    cam = transform_points(world_to_cam[..., None, :, :], points)
    return project_points(cam, K[..., None, :, :]), cam[..., 2]


def relative_poses(cam_to_world: Tensor) -> Tensor:
    """Poses (..., V, 4, 4) relative to the first view: T_0^-1 T_v (view 0 becomes the identity)."""
    first = cam_to_world[..., :1, :, :].expand_as(cam_to_world)
    flat = relative_transformation(first.reshape(-1, 4, 4), cam_to_world.reshape(-1, 4, 4))  # kornia: (N, 4, 4)
    return flat.reshape(cam_to_world.shape)


def look_at(eye: Tensor, target: Tensor, up: Tensor | None = None) -> Tensor:
    """cam_to_world (..., 4, 4) of cameras at ``eye`` (..., 3) looking at ``target``, in the OpenCV convention:
    z towards the target, x right, y down, with ``up`` (default world +z) pointing up in the image."""
    if up is None:
        up = torch.tensor([0.0, 0.0, 1.0], dtype=eye.dtype, device=eye.device)
    z = F.normalize(target - eye, dim=-1)
    x = F.normalize(torch.linalg.cross(z, up.expand_as(z), dim=-1), dim=-1)  # right = forward x up
    y = torch.linalg.cross(z, x, dim=-1)  # down, completing a right-handed frame
    pose = torch.zeros(*eye.shape[:-1], 4, 4, dtype=eye.dtype, device=eye.device)
    pose[..., :3, 0], pose[..., :3, 1], pose[..., :3, 2], pose[..., :3, 3] = x, y, z, eye
    pose[..., 3, 3] = 1.0
    return pose


def intrinsics(focal: Tensor | float, h: int, w: int) -> Tensor:
    """K (..., 3, 3) with square pixels of focal length ``focal`` (pixels) and the principal point at the image
    centre (w / 2, h / 2)."""
    focal = torch.as_tensor(focal, dtype=torch.float32)
    K = torch.zeros(*focal.shape, 3, 3)
    K[..., 0, 0] = K[..., 1, 1] = focal
    K[..., 0, 2], K[..., 1, 2], K[..., 2, 2] = w / 2, h / 2, 1.0
    return K


__all__ = [
    'camera_points',
    'frustum_points',
    'intrinsics',
    'linear_increasing_depths',
    'look_at',
    'patch_pixel_centres',
    'pixel_centres',
    'plucker',
    'project',
    'rays',
    'relative_poses',
]
