"""Plucker-ray camera encoding for multi-view transformers (cameras from ``pos.cameras``, OpenCV convention)."""

from __future__ import annotations

import torch
from torch import nn

from vispe import geometry as G
from vispe.encodings.base import Encoding
from vispe.positions import Cameras, Positions
from vispe.registry import ENCODINGS


def require_cameras(pos: Positions, name: str) -> Cameras:
    if pos.cameras is None:
        raise ValueError(f'{name} needs cameras in the positions; the multi-view transformer supplies them')
    return pos.cameras


def camera_poses(cameras: Cameras, relative: bool) -> torch.Tensor:
    """(B, V, 4, 4) float32 camera-to-world poses, relative to the first view when ``relative``."""
    poses = cameras.cam_to_world.float()
    return G.relative_poses(poses) if relative else poses


@ENCODINGS.register_module(name='plucker')
class Plucker(Encoding):
    """Plucker rays (o x d, d) of each patch, embedded linearly and added to its token; rays in float32.
    Absolute: a rigid motion of every camera changes the tokens, unless ``relative``.

    Args:
        dim: model width.
        patch_size: pixels per token side.
        patchify: embed the rays of every pixel of the patch (6 p^2 values); False: the patch centre's ray.
        relative: poses relative to the first view, which makes the encoding independent of the world frame.
    """

    ndims = (2,)
    needs_cameras = True

    def __init__(self, dim: int, patch_size: int = 16, patchify: bool = True, relative: bool = False) -> None:
        super().__init__()
        self.patch_size, self.patchify, self.relative = int(patch_size), bool(patchify), bool(relative)
        rays_per_token = self.patch_size**2 if self.patchify else 1
        self.proj = nn.Linear(6 * rays_per_token, dim)

    def rays(self, pos: Positions) -> torch.Tensor:
        """(B, V * N, 6 r) float32 Plucker coordinates of the r rays of each token, view-major."""
        cameras = require_cameras(pos, 'plucker')
        if cameras.patch_size != self.patch_size:
            raise ValueError(
                f'plucker was built for {self.patch_size} px patches, the positions have {cameras.patch_size}; build '
                'it with the backbone that uses it'
            )
        (h, w), p = cameras.grid, cameras.patch_size
        device = cameras.K.device
        if self.patchify:
            uv = G.patch_pixel_centres(h, w, p, device=device).reshape(-1, 2)
        else:
            uv = G.pixel_centres(h, w, stride=p, device=device)
        with torch.autocast(device.type, enabled=False):
            origin, direction = G.rays(cameras.K.float(), camera_poses(cameras, self.relative), uv)
            rays = G.plucker(origin, direction)  # (B, V, N r, 6)
        B, V = rays.shape[:2]
        return rays.reshape(B, V * h * w, -1)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x + self.proj(self.rays(pos).to(self.proj.weight.dtype)).to(x.dtype)

    def extra_repr(self) -> str:
        return f'patch_size={self.patch_size}, patchify={self.patchify}, relative={self.relative}'


__all__ = ['Plucker', 'camera_poses', 'require_cameras']
