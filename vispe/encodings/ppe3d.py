"""3DPPE, 3D point positional encoding (Shu et al., "3DPPE: 3D Point Positional Encoding for Transformer-based
Multi-Camera 3D Object Detection", ICCV 2023; code: drilistbox/3DPPE), registered as ``3dppe``.

PETR (``vispe.encodings.petr``) embeds each token's whole camera ray, sampled at D depth bins. 3DPPE embeds one
point of it instead: the point at the depth of the surface the token sees,

    p = T K^-1 (u d, v d, d)^T,

with (u, v) the token's patch centre, d its depth, K the intrinsics and T the camera-to-world pose (with
``relative``, the pose relative to view 0). p is normalised to the box ``scene_range``, taken through the inverse
sigmoid (points outside the box saturate), and encoded by a sinusoid per axis,

    s(x)_2i = sin(2 pi x / tau^(2i / F)),   s(x)_2i+1 = cos(2 pi x / tau^(2i / F)),   i < F / 2,

F = dim / 2 features per axis, tau = ``temperature``, axes in the order (y, x, z), then a two-layer MLP (3 dim / 2
-> dim -> dim) whose output is added to the token.

The depth (``depth_source``):

- ``'predicted'`` (3DPPE): a small head on each token's patch embedding gives a distribution over D depth bins spread
  uniformly over ``depth_range``; d is its expectation. Given depth maps, the head is trained by a smooth L1 loss
  (beta 1/9, the reference's) between d and the token's surface depth, over the tokens whose surface lies within
  ``depth_range``, added to the task's loss as ``loss_depth`` (weight ``depth_loss_weight``; ``Positions.
  aux_losses``). The localisation loss reaches the head through the point as well (the reference's
  ``use_detach=False``; ``detach_depth=True`` stops it).
- ``'gt'``: the depth maps' own surface depth (each token's nearest surface in its patch), ``depth_range[1]`` where
  a token sees none: the encoding with perfect depth, an upper bound for the predicted one. Refused without depth
  maps.

Departures from the reference: its depth network is a camera-aware convolutional net on backbone features
(``CameraAwareDepthNet``); vispe's is an MLP on the patch embedding, as small as the tiny models it serves. Its
pixels are the feature cells' top-left corners; vispe takes the patch centres, like its PETR (``anchor='corner'``
takes the corners, as the reference: tests/parity/test_parity_3dppe.py). Points outside
the box are masked out of its attention; vispe's saturate, like its PETR, since masking would drop tokens from
the backbone's attention. Depth supervision comes from rendered depth maps (the multiview scenes) instead of
projected LiDAR points.

Cost: per token one point (a 3 x 3 and a 4 x 4 transform), a (3 dim / 2) sinusoid and the MLP, and with
``'predicted'`` the head's two linear layers, once per forward pass. CPU, a training step of the camera configs'
tiny multi-view model (32 px, 2 views, batch 32, one thread; ``tools/benchmark.py --model multiview``): 1.10x
plucker's, below petr's 1.18x (one point per token against 64 depth bins). GPU: not yet measured.
"""

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
    """(..., 3) -> (..., 3 features): per axis, ``features`` values sin / cos (interleaved) of 2 pi x at the
    frequencies 1 / temperature^(2i / features), axes in the order (y, x, z) (the module doc's s)."""
    i = torch.arange(features, device=points.device, dtype=torch.float32)
    inv = temperature ** (-2 * torch.div(i, 2, rounding_mode='floor') / features)  # each frequency twice
    angles = 2 * math.pi * points.float()[..., None] * inv  # (..., 3, features)
    waves = torch.stack([angles[..., 0::2].sin(), angles[..., 1::2].cos()], dim=-1).flatten(-2)
    x, y, z = waves.unbind(-2)
    return torch.cat([y, x, z], dim=-1)


@ENCODINGS.register_module(name='3dppe')
class PPE3D(Encoding):
    """3DPPE: each token's camera ray embedded at one point, the surface it sees (module doc: the maths, the
    depth sources and the departures from the reference).

    Args:
        dim: model width (even: two sinusoid halves per axis).
        depth_source: ``'predicted'`` (a depth head trained with the model) or ``'gt'`` (the depth maps' own).
        num_depths: D, the depth head's bins (the reference's 64).
        depth_range: (near, far) of the bins, in the data's unit.
        scene_range: (x_min, y_min, z_min, x_max, y_max, z_max), the box points are normalised to.
        relative: poses relative to the first view.
        temperature: the sinusoid's tau (the reference's 10000).
        depth_loss_weight: weight of ``loss_depth``.
        detach_depth: keep the localisation loss out of the depth head.
        anchor: the pixel each token's point lies on the ray of: ``'centre'`` of its patch, or ``'corner'``, the patch's
            top-left corner, as the reference (module doc).

    Weight decay: nothing to declare: the encoder and the depth head are ordinary linear layers, decayed as the
    reference trains them; their biases, 1-D, take none.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.
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
        """(B, V * N) float32: each token's surface depth from the depth maps (0: none), or None without them."""
        depth = require_cameras(pos, '3dppe').depth
        return None if depth is None else depth.float().flatten(1)

    def token_depth(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        """(B, V * N) float32 depth of each token's point; with ``'predicted'`` and depth maps, records
        ``loss_depth`` in ``pos.aux_losses``."""
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
        """(B, V * N, 3) float32 points at ``depth`` (B, V * N) on each token's ray through its ``anchor`` pixel."""
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
