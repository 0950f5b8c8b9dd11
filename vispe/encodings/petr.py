"""PETR's 3D position embedding (Liu et al., "PETR: Position Embedding Transformation for Multi-View 3D Object
Detection", ECCV 2022), with PETRv2's feature-guided variant as an option.

For each token, the ray through its patch centre is sampled at D depths (linear-increasing bins, denser near the
camera), the points are taken to the world frame, normalised to a fixed scene range, passed through the inverse
sigmoid and concatenated (3 D values), and two 1x1 convolutions (per-token linear layers) with a ReLU map them to
the model width. The result is added to the tokens. Cameras come from ``pos.cameras`` (OpenCV convention).

Departure (``anchor``): vispe casts each token's ray through its patch centre, ((j + 0.5) p, (i + 0.5) p) for patch
(i, j) of p pixels. The reference (megvii-research/PETR, ``PETRHead.position_embeding``) takes (j p, i p), the
top-left corner of the patch in vispe's convention (``coords_w = arange(W) * pad_w / W``); ``anchor='corner'`` does
the same (tests/parity/test_parity_petr.py). The far end of the depth bins is its own setting here (``depth_range``);
the reference takes it from the scene box (``position_range[3]``).
"""

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
    """log(x / (1 - x)) with x clamped to [0, 1] and both terms floored at eps."""
    x = x.clamp(0.0, 1.0)
    return torch.log(x.clamp_min(eps) / (1.0 - x).clamp_min(eps))


#: where each token's ray leaves its patch: the patch centre (vispe) or its top-left corner (PETR's and 3DPPE's code)
ANCHORS = ('centre', 'corner')


def token_pixels(cameras: Cameras, anchor: str) -> torch.Tensor:
    """(h * w, 2) float32 (u, v) of each token of a view, row-major: its patch centre ((j + 0.5) p, (i + 0.5) p),
    or with ``anchor='corner'`` its top-left corner (j p, i p), the pixel the references cast the ray through."""
    (h, w), p = cameras.grid, cameras.patch_size
    uv = G.pixel_centres(h, w, stride=p, device=cameras.K.device)
    return uv if anchor == 'centre' else uv - 0.5 * p


def check_anchor(owner: str, anchor: str) -> str:
    if anchor not in ANCHORS:
        raise ValueError(f'{owner} anchor is one of {ANCHORS}, got {anchor!r}')
    return anchor


def depth_and_scene(owner: str, depth_range: Sequence[float], scene_range: Sequence[float]) -> tuple[float, float]:
    """(near, far) of ``depth_range``, after checking it (0 < near < far) and the box ``scene_range`` (x_min, y_min,
    z_min, x_max, y_max, z_max, each min below its max); ValueError naming ``owner`` otherwise."""
    near, far = (float(v) for v in depth_range)
    if not 0 < near < far:
        raise ValueError(f'{owner} needs depth_range=(near, far) with 0 < near < far, got {tuple(depth_range)}')
    if len(scene_range) != 6 or any(scene_range[i] >= scene_range[i + 3] for i in range(3)):
        raise ValueError(f'{owner} needs scene_range=(x_min, y_min, z_min, x_max, y_max, z_max), got {scene_range}')
    return near, far


@ENCODINGS.register_module(name='petr')
class PETR(Encoding):
    """PETR 3D position embedding of each token's camera frustum.

    Args:
        dim: model width.
        num_depths: D depth bins (64 in PETR).
        depth_range: (near, far) of the bins in the data's unit.
        scene_range: (x_min, y_min, z_min, x_max, y_max, z_max), the world box the points are normalised to (points
            outside saturate).
        hidden_dim: width of the first 1x1 conv (None: 4 dim, as PETR).
        feature_guided: PETRv2's variant, PE * sigmoid(MLP(token features)).
        relative: poses relative to the first view.
        anchor: the pixel each token's ray goes through: ``'centre'`` of its patch, or ``'corner'``, the patch's
            top-left corner, as the reference (module doc).

    Weight decay: nothing to declare: the position encoder's layers are ordinary 1x1 convs (linear layers here),
    decayed as PETR trains them; their biases, 1-D, take none.

    Attention path: none of its own (it changes the tokens, not the attention): fused SDPA without a mask stays.
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
        """(B, V * N, 3 D) float32: the inverse-sigmoid normalised frustum points of every token, view-major."""
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
