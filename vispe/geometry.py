"""Camera geometry for the camera encodings, on kornia, in one convention (OpenCV) used everywhere in vispe:

- camera frame: x right, y down, z forward;
- intrinsics ``K`` (..., 3, 3) in pixels: u = fx x / z + cx, v = fy y / z + cy, (u, v) = (column, row), the centre of
  pixel (i, j) at (j + 0.5, i + 0.5);
- poses ``cam_to_world`` (..., 4, 4): [R | t] maps camera-frame points to the world (t is the camera centre).

The helpers assume valid cameras; ``check_cameras`` (run by ``vispe.positions.Cameras``) refuses the others.
"""

from __future__ import annotations

import torch
import torch.fx
import torch.nn.functional as F
from kornia.geometry.camera import project_points, unproject_points
from kornia.geometry.linalg import inverse_transformation, relative_transformation, transform_points
from torch import Tensor


def pixel_centres(h: int, w: int, stride: int = 1, device: torch.device | None = None) -> Tensor:
    """(h * w, 2) float32 (u, v) centres of an h x w grid of stride x stride cells, row-major."""
    rows = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) * stride
    cols = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) * stride
    v, u = torch.meshgrid(rows, cols, indexing='ij')
    return torch.stack([u, v], dim=-1).reshape(-1, 2)


def patch_pixel_centres(h: int, w: int, patch: int, device: torch.device | None = None) -> Tensor:
    """(h * w, patch * patch, 2) (u, v) centres of each patch's pixels, tokens and pixels row-major."""
    pixels = pixel_centres(h * patch, w * patch, device=device).reshape(h, patch, w, patch, 2)
    return pixels.permute(0, 2, 1, 3, 4).reshape(h * w, patch * patch, 2)


def _expand_points(uv: Tensor, K: Tensor) -> Tensor:
    return uv.expand(*K.shape[:-2], *uv.shape[-2:]).to(K.dtype)


def camera_points(K: Tensor, uv: Tensor, depth: Tensor | float) -> Tensor:
    """Camera-frame points (..., N, 3) at pixel ``uv`` (N, 2) or (..., N, 2) and camera-frame depth z."""
    uv = _expand_points(uv, K)
    depth = torch.as_tensor(depth, dtype=K.dtype, device=K.device).expand(*uv.shape[:-1], 1)
    return unproject_points(uv, depth, K[..., None, :, :])


def rays(K: Tensor, cam_to_world: Tensor, uv: Tensor) -> tuple[Tensor, Tensor]:
    """World-frame rays through ``uv``: origins and unit directions (..., N, 3), d = normalise(R K^-1 [u, v, 1])."""
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


def rigid_inverse(transform: Tensor) -> Tensor:
    """Inverses [[R^T, -R^T t], [0, 1]] of rigid transforms (..., 4, 4)."""
    return inverse_transformation(transform.reshape(-1, 4, 4)).reshape(transform.shape)


def project(K: Tensor, cam_to_world: Tensor, points: Tensor) -> tuple[Tensor, Tensor]:
    """Pixels (..., N, 2) and camera-frame depths (..., N) of world points (..., N, 3)."""
    world_to_cam = rigid_inverse(cam_to_world)
    cam = transform_points(world_to_cam[..., None, :, :], points)
    return project_points(cam, K[..., None, :, :]), cam[..., 2]


def relative_poses(cam_to_world: Tensor) -> Tensor:
    """Poses (..., V, 4, 4) relative to the first view: T_0^-1 T_v (view 0 becomes the identity)."""
    first = cam_to_world[..., :1, :, :].expand_as(cam_to_world)
    flat = relative_transformation(first.reshape(-1, 4, 4), cam_to_world.reshape(-1, 4, 4))  # kornia: (N, 4, 4)
    return flat.reshape(cam_to_world.shape)


def look_at(eye: Tensor, target: Tensor, up: Tensor | None = None) -> Tensor:
    """cam_to_world (..., 4, 4) of cameras at ``eye`` looking at ``target``, ``up`` (default +z) up in the image."""
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
    """K (..., 3, 3) with square pixels of focal length ``focal`` (pixels), principal point at (w / 2, h / 2)."""
    focal = torch.as_tensor(focal, dtype=torch.float32)
    K = torch.zeros(*focal.shape, 3, 3)
    K[..., 0, 0] = K[..., 1, 1] = focal
    K[..., 0, 2], K[..., 1, 2], K[..., 2, 2] = w / 2, h / 2, 1.0
    return K


#: how far a camera may be from exact (``check_cameras``): max |R^T R - I|, |det R - 1| and the bottom rows'
#: deviation from (0, 0, 0, 1) / (0, 0, 1). R is unit-scale, so absolute here is relative; float16 / bfloat16 inputs
#: get 4 eps of their dtype when that is larger.
CAMERA_TOL = 1e-3

#: the largest magnitude of a K or pose entry (and the inverse of the smallest focal length) the camera encodings
#: compute in float32, which overflows at 3.4e38: PRoPE's projection chain multiplies a focal length by a translation
#: and squares the product (NaN from about 1e12 each), Plucker's moment and GTA's pose chain square a translation
CAMERA_MAX = 1e9

_K_PROBLEMS = (
    'has NaN/Inf entries',
    'is singular (fx = K[0, 0] is 0)',
    'is singular (fy = K[1, 1] is 0)',
    'has last row other than (0, 0, 1)',
    f'has a focal length under {1 / CAMERA_MAX:g} or an entry over {CAMERA_MAX:g} in magnitude, which the camera '
    'encodings cannot compute in float32',
)
_POSE_PROBLEMS = (
    'has NaN/Inf entries',
    'is not rigid (R^T R is not I: a scaled, sheared or zero rotation)',
    'is not rigid (det R is not +1: a reflection)',
    'has last row other than (0, 0, 0, 1)',
    f'has an entry over {CAMERA_MAX:g} in magnitude, which the camera encodings cannot compute in float32',
)


def check_cameras(K: Tensor, cam_to_world: Tensor, tol: float = CAMERA_TOL) -> None:
    """Refuse degenerate cameras with a ValueError naming the first bad view and what to fix: K finite with non-zero
    fx, fy and last row (0, 0, 1) (skew unchecked); cam_to_world finite and rigid (R^T R = I, det R = +1, last row
    (0, 0, 0, 1)) within ``tol`` (at least 4 eps for half dtypes); no entry over ``CAMERA_MAX`` in magnitude nor a
    focal length under its inverse. One host sync per call; skipped while traced (torch.compile, torch.export, FX,
    TorchScript): call it before a compiled model to keep the check."""
    if _traced(K, cam_to_world):
        return
    if K.shape[-2:] != (3, 3) or cam_to_world.shape[-2:] != (4, 4):
        raise ValueError(
            f'cameras: K must be (..., 3, 3) and cam_to_world (..., 4, 4), got {tuple(K.shape)} and '
            f'{tuple(cam_to_world.shape)}'
        )
    half = [t.dtype for t in (K, cam_to_world) if t.dtype in (torch.float16, torch.bfloat16)]
    tol = max([tol] + [4 * torch.finfo(dtype).eps for dtype in half])
    K, pose = _work(K.detach()), _work(cam_to_world.detach())
    k_faults, pose_faults = _intrinsics_faults(K, tol), _pose_faults(pose, tol)  # (..., n) bool: which check fails
    if not bool(k_faults.any() | pose_faults.any()):  # the one sync
        return
    if k_faults.any():
        _raise(
            k_faults,
            'K',
            _K_PROBLEMS,
            f'pass intrinsics in pixels with finite fx, fy of magnitude {1 / CAMERA_MAX:g} to {CAMERA_MAX:g} and '
            'last row (0, 0, 1)',
        )
    _raise(
        pose_faults,
        'cam_to_world',
        _POSE_PROBLEMS,
        f'pass a rigid camera-to-world pose: rotation R with R^T R = I '
        f'and det R = +1, last row (0, 0, 0, 1), within {tol:g}, and a translation within {CAMERA_MAX:g} (rescale '
        "the scene's units)",
    )


def _traced(*tensors: Tensor) -> bool:
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting():
        return True
    return any(isinstance(t, torch.fx.Proxy) or t.device.type == 'meta' for t in tensors)


def _work(x: Tensor) -> Tensor:
    return x if x.dtype == torch.float64 else x.float()


def _intrinsics_faults(K: Tensor, tol: float) -> Tensor:
    last = K.new_tensor([0.0, 0.0, 1.0])
    finite = torch.isfinite(K).all(dim=(-2, -1))
    near = (K[..., 2, :] - last).abs() <= tol  # (NaN fails)
    focal = K[..., [0, 1], [0, 1]].abs()
    tiny = ((focal > 0) & (focal < 1 / CAMERA_MAX)).any(dim=-1)
    out_of_range = tiny | (K.abs() > CAMERA_MAX).any(dim=(-2, -1))
    return torch.stack([~finite, K[..., 0, 0] == 0, K[..., 1, 1] == 0, ~near.all(dim=-1), out_of_range], dim=-1)


def _pose_faults(pose: Tensor, tol: float) -> Tensor:
    R = pose[..., :3, :3]
    eye, last = torch.eye(3, dtype=pose.dtype, device=pose.device), pose.new_tensor([0.0, 0.0, 0.0, 1.0])
    finite = torch.isfinite(pose).all(dim=(-2, -1))
    gram = (R[..., :, :, None] * R[..., :, None, :]).sum(dim=-3)  # R^T R, pointwise: no bf16 matmul under autocast
    orthonormal = ((gram - eye).abs() <= tol).all(dim=(-2, -1))
    det = (torch.linalg.cross(R[..., 0], R[..., 1], dim=-1) * R[..., 2]).sum(dim=-1)  # columns' triple product
    near = ((pose[..., 3, :] - last).abs() <= tol).all(dim=-1)
    huge = (pose.abs() > CAMERA_MAX).any(dim=(-2, -1))
    return torch.stack([~finite, ~orthonormal, ~((det - 1).abs() <= tol), ~near, huge], dim=-1)


def _raise(faults: Tensor, what: str, problems: tuple[str, ...], fix: str) -> None:
    bad = faults.any(dim=-1)
    first = [int(i) for i in bad.nonzero()[0]]
    names = ('batch', 'view')[-len(first) :] if 0 < len(first) <= 2 else ('index',) * len(first)
    where = f' ({", ".join(f"{n} {i}" for n, i in zip(names, first))})' if first else ''
    problem = problems[int(faults[tuple(first)].nonzero()[0, 0])]
    more = int(bad.sum()) - 1
    others = f' (and {more} more view{"s" if more > 1 else ""})' if more else ''
    raise ValueError(f'camera{where}: {what} {problem}{others}; {fix}')


__all__ = [
    'CAMERA_MAX',
    'CAMERA_TOL',
    'camera_points',
    'check_cameras',
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
