"""3DPPE, 3D point positional encoding (Shu et al., ICCV 2023), registered as ``3dppe``: the point
p = T K^-1 (u d, v d, d)^T each token sees at depth d, normalised to ``scene_range``, through the inverse sigmoid, an
interleaved sinusoid per axis (y, x, z; angle 2 pi x / tau^(2i / F), F = dim / 2) and an MLP. ``'predicted'`` depth:
the expectation of a head over D bins, trained by smooth L1 (beta 1/9) against the depth maps (``loss_depth``).
Departures: the depth head is an MLP on the patch embedding, not a camera-aware conv net; the ray goes through the
patch centre (``anchor='corner'``: the reference's); points outside the box saturate instead of being masked."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from kornia.geometry.linalg import transform_points
from torch import nn

from vispe import geometry as G
from vispe.encodings.base import Encoding, check_positive
from vispe.encodings.camera import camera_poses, require_cameras
from vispe.encodings.petr import check_anchor, depth_and_scene, inverse_sigmoid, token_pixels
from vispe.positions import Positions
from vispe.registry import ENCODINGS

#: the reference's smooth L1 threshold for the depth loss
DEPTH_LOSS_BETA = 1.0 / 9.0


def sine_embedding_3d(points: torch.Tensor, features: int, temperature: float = 10000.0) -> torch.Tensor:
    """(..., 3) -> (..., 3 features): the module docstring's s per axis, sin / cos interleaved, axes (y, x, z)."""
    i = torch.arange(features, device=points.device, dtype=torch.float32)
    inv = temperature ** (-2 * torch.div(i, 2, rounding_mode='floor') / features)  # each frequency twice
    angles = 2 * math.pi * points.float()[..., None] * inv  # (..., 3, features)
    waves = torch.stack([angles[..., 0::2].sin(), angles[..., 1::2].cos()], dim=-1).flatten(-2)
    x, y, z = waves.unbind(-2)
    return torch.cat([y, x, z], dim=-1)


@ENCODINGS.register_module(name='3dppe')
class PPE3D(Encoding):
    """3DPPE (module docstring).

    Args:
        dim: model width (even).
        depth_source: ``'predicted'`` or ``'gt'``.
        num_depths: D, the depth head's bins.
        depth_range: (near, far) of the bins, in the data's unit.
        scene_range: (x_min, y_min, z_min, x_max, y_max, z_max), the box points are normalised to.
        relative: poses relative to the first view.
        temperature: the sinusoid's tau.
        depth_loss_weight: weight of ``loss_depth``.
        detach_depth: keep the localisation loss out of the depth head.
        anchor: ``'centre'`` or ``'corner'`` of the patch, the pixel each ray goes through.
    """

    ndims = (2,)
    needs_cameras = True
    depth_sources = ('predicted', 'gt')
    lo: torch.Tensor  # buffers: the scene box's (3,) corners and the (D,) bin centres
    hi: torch.Tensor
    bins: torch.Tensor

    def __init__(
        self,
        dim: int,
        depth_source: str = 'predicted',
        num_depths: int = 64,
        depth_range: Sequence[float] = (1.0, 8.0),
        scene_range: Sequence[float] = (-3.0, -3.0, -3.0, 3.0, 3.0, 3.0),
        relative: bool = False,
        temperature: float = 10000.0,
        depth_loss_weight: float = 1.0,
        detach_depth: bool = False,
        anchor: str = 'centre',
    ) -> None:
        super().__init__()
        self.anchor = check_anchor('3dppe', anchor)
        if depth_source not in self.depth_sources:
            raise ValueError(f'3dppe depth_source is one of {self.depth_sources}, got {depth_source!r}')
        if dim % 2:
            raise ValueError(f'3dppe needs an even dim (sine and cosine halves per axis), got {dim}')
        near, far = depth_and_scene('3dppe', depth_range, scene_range)
        check_positive('3dppe', num_depths=num_depths, temperature=temperature)
        if depth_loss_weight < 0:
            raise ValueError(f'3dppe depth_loss_weight must be >= 0, got {depth_loss_weight}')
        self.depth_source, self.depth_range, self.relative = depth_source, (near, far), bool(relative)
        self.temperature, self.depth_loss_weight, self.detach_depth = temperature, depth_loss_weight, detach_depth
        self.register_buffer('lo', torch.tensor(scene_range[:3], dtype=torch.float32), persistent=False)
        self.register_buffer('hi', torch.tensor(scene_range[3:], dtype=torch.float32), persistent=False)
        self.register_buffer('bins', torch.linspace(near, far, int(num_depths)), persistent=False)
        self.encoder = nn.Sequential(nn.Linear(3 * dim // 2, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.depth_head = (
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, int(num_depths)))
            if depth_source == 'predicted'
            else None
        )

    def surface_depth(self, pos: Positions) -> torch.Tensor | None:
        """(B, V * N) float32 surface depth of each token from the depth maps (0: none), or None without them."""
        depth = require_cameras(pos, '3dppe').depth
        return None if depth is None else depth.float().flatten(1)

    def token_depth(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        """(B, V * N) float32 depth of each token's point; records ``loss_depth`` when predicted with depth maps."""
        target = self.surface_depth(pos)
        if self.depth_head is None:
            if target is None:
                raise ValueError(
                    "3dppe with depth_source='gt' needs the views' depth maps: pass depth= to the model (the "
                    "multiview scenes' batches carry them), or use depth_source='predicted'"
                )
            return torch.where(target > 0, target, torch.full_like(target, self.depth_range[1]))
        logits = self.depth_head(x).float()  # (B, V N, D)
        predicted = (logits.softmax(dim=-1) * self.bins).sum(dim=-1)
        if target is not None and self.depth_loss_weight > 0:
            near, far = self.depth_range
            valid = ((target >= near) & (target <= far)).float()
            per_token = F.smooth_l1_loss(predicted, target, beta=DEPTH_LOSS_BETA, reduction='none')
            loss = (per_token * valid).sum() / valid.sum().clamp_min(1.0)
            pos.aux_losses['loss_depth'] = self.depth_loss_weight * loss
        return predicted.detach() if self.detach_depth else predicted

    def points(self, pos: Positions, depth: torch.Tensor) -> torch.Tensor:
        """(B, V * N, 3) float32 points at ``depth`` on each token's ray."""
        cameras = require_cameras(pos, '3dppe')
        (h, w), uv = cameras.grid, token_pixels(cameras, self.anchor)
        B, V = cameras.K.shape[:2]
        with torch.autocast(cameras.K.device.type, enabled=False):
            cam = G.camera_points(cameras.K.float(), uv, depth.reshape(B, V, h * w, 1))  # z = depth
            world = transform_points(camera_poses(cameras, self.relative)[:, :, None], cam)  # (B, V, N, 3)
        return world.reshape(B, V * h * w, 3)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        points = self.points(pos, self.token_depth(x, pos))
        normalised = inverse_sigmoid((points - self.lo) / (self.hi - self.lo))
        features = sine_embedding_3d(normalised, x.shape[-1] // 2, self.temperature)
        linear = self.encoder[0]
        assert isinstance(linear, nn.Linear)
        return x + self.encoder(features.to(linear.weight.dtype)).to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f'depth_source={self.depth_source!r}, depth_range={self.depth_range}, relative={self.relative}, '
            f'anchor={self.anchor!r}'
        )


__all__ = ['PPE3D', 'sine_embedding_3d']
