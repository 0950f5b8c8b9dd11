"""PETR's 3D position embedding (Liu et al., ECCV 2022), with PETRv2's feature-guided variant as an option:
each token's ray sampled at D depths, in the world frame, normalised to ``scene_range``, through the inverse
sigmoid, then two 1x1 convs (linear layers). Departures: the ray goes through the patch centre, the reference's
through its corner (``anchor='corner'``); the bins end at ``depth_range``, the reference's at the scene box."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from vispe import geometry as G
from vispe.encodings.base import Encoding, check_positive
from vispe.encodings.camera import camera_poses, require_cameras
from vispe.positions import Cameras, Positions
from vispe.registry import ENCODINGS


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(0.0, 1.0)
    return torch.log(x.clamp_min(eps) / (1.0 - x).clamp_min(eps))


#: where each token's ray leaves its patch: the patch centre (vispe) or its top-left corner (PETR's and 3DPPE's code)
ANCHORS = ('centre', 'corner')


def token_pixels(cameras: Cameras, anchor: str) -> torch.Tensor:
    """(h * w, 2) float32 (u, v) of each token of a view, row-major: its patch centre, or top-left corner."""
    (h, w), p = cameras.grid, cameras.patch_size
    uv = G.pixel_centres(h, w, stride=p, device=cameras.K.device)
    return uv if anchor == 'centre' else uv - 0.5 * p


def check_anchor(owner: str, anchor: str) -> str:
    if anchor not in ANCHORS:
        raise ValueError(f'{owner} anchor is one of {ANCHORS}, got {anchor!r}')
    return anchor


def depth_and_scene(owner: str, depth_range: Sequence[float], scene_range: Sequence[float]) -> tuple[float, float]:
    """(near, far) of ``depth_range``, checked (0 < near < far) with ``scene_range`` (each min below its max)."""
    near, far = (float(v) for v in depth_range)
    if not 0 < near < far:
        raise ValueError(f'{owner} needs depth_range=(near, far) with 0 < near < far, got {tuple(depth_range)}')
    if len(scene_range) != 6 or any(scene_range[i] >= scene_range[i + 3] for i in range(3)):
        raise ValueError(f'{owner} needs scene_range=(x_min, y_min, z_min, x_max, y_max, z_max), got {scene_range}')
    return near, far


@ENCODINGS.register_module(name='petr')
class PETR(Encoding):
    """PETR 3D position embedding (module docstring), added to each token.

    Args:
        dim: model width.
        num_depths: D depth bins.
        depth_range: (near, far) of the bins, in the data's unit.
        scene_range: (x_min, y_min, z_min, x_max, y_max, z_max), the box points are normalised to.
        hidden_dim: width of the first 1x1 conv (None: 4 dim).
        feature_guided: PETRv2's PE * sigmoid(MLP(token features)).
        relative: poses relative to the first view.
        anchor: ``'centre'`` or ``'corner'`` of the patch, the pixel each ray goes through.
    """

    ndims = (2,)
    needs_cameras = True
    lo: torch.Tensor  # buffers: the scene box's (3,) corners and the (D,) depth bins
    hi: torch.Tensor
    depths: torch.Tensor

    def __init__(
        self,
        dim: int,
        num_depths: int = 64,
        depth_range: Sequence[float] = (1.0, 8.0),
        scene_range: Sequence[float] = (-3.0, -3.0, -3.0, 3.0, 3.0, 3.0),
        hidden_dim: int | None = None,
        feature_guided: bool = False,
        relative: bool = False,
        anchor: str = 'centre',
    ) -> None:
        super().__init__()
        near, far = depth_and_scene('petr', depth_range, scene_range)
        self.anchor = check_anchor('petr', anchor)
        check_positive('petr', num_depths=num_depths, hidden_dim=hidden_dim)
        self.num_depths, self.depth_range, self.relative = int(num_depths), (near, far), bool(relative)
        self.register_buffer('lo', torch.tensor(scene_range[:3], dtype=torch.float32), persistent=False)
        self.register_buffer('hi', torch.tensor(scene_range[3:], dtype=torch.float32), persistent=False)
        self.register_buffer('depths', G.linear_increasing_depths(self.num_depths, near, far), persistent=False)
        hidden = hidden_dim or 4 * dim
        self.mlp = nn.Sequential(nn.Linear(3 * self.num_depths, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.guide = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim)) if feature_guided else None

    def frustum(self, pos: Positions) -> torch.Tensor:
        """(B, V * N, 3 D) float32 inverse-sigmoid normalised frustum points of every token, view-major."""
        cameras = require_cameras(pos, 'petr')
        (h, w), uv = cameras.grid, token_pixels(cameras, self.anchor)
        with torch.autocast(cameras.K.device.type, enabled=False):
            points = G.frustum_points(cameras.K.float(), camera_poses(cameras, self.relative), uv, self.depths)
            normalised = (points - self.lo) / (self.hi - self.lo)  # (B, V, N, D, 3)
            coords = inverse_sigmoid(normalised)
        B, V = coords.shape[:2]
        return coords.reshape(B, V * h * w, -1)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        pe = self.mlp(self.frustum(pos).to(cast(nn.Linear, self.mlp[0]).weight.dtype)).to(x.dtype)
        if self.guide is not None:
            pe = pe * torch.sigmoid(self.guide(x))
        return x + pe

    def extra_repr(self) -> str:
        return (
            f'num_depths={self.num_depths}, depth_range={self.depth_range}, relative={self.relative}, '
            f'anchor={self.anchor!r}'
        )


__all__ = ['ANCHORS', 'PETR', 'check_anchor', 'depth_and_scene', 'inverse_sigmoid', 'token_pixels']
