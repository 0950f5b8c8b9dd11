"""A default camera rig for drawing the camera encodings (plucker, petr, 3dppe, gta, prope) on a bare token grid.

The rig (``Rig``): two views of one pinhole camera with square pixels, horizontal field of view ``fov``, each view an
h x w grid of ``patch`` px tokens (OpenCV convention, ``vispe.geometry``). View 1 sits at the world origin looking
along +z at the plane z = ``depth``; view 2 sits ``baseline`` to its right (+x) and, when ``converge``, turns toward
the point where view 1's optical axis meets the plane (else it looks along +z too). Each token's depth is that of the
plane along its patch centre's ray, as the multi-view transformer pools a depth map. Tokens are view-major, as the
multi-view transformer lays them out: view 1's first, so a query cell of view 1 is its row-major index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from vispe import geometry
from vispe.encodings.base import Encoding
from vispe.encodings.build import encoding_class, normalize_spec
from vispe.encodings.stack import EncodingStack
from vispe.positions import Cameras, Positions, grid_coords, grid_positions
from vispe.registry import MODELS


@dataclass(frozen=True)
class Rig:
    """Two views looking at a plane (module docstring).

    Attributes:
        fov: horizontal field of view in degrees, in (0, 180).
        baseline: view 2's camera centre to the right of view 1's, in the scene's units.
        depth: the plane z = depth both views look at, > 0.
        converge: view 2 turns toward (0, 0, depth); False: both look along +z.
        patch: pixels per token side (the camera encodings' patch size).
    """

    fov: float = 60.0
    baseline: float = 1.0
    depth: float = 2.0
    converge: bool = True
    patch: int = 16

    def __post_init__(self) -> None:
        if not (0 < self.fov < 180 and self.depth > 0 and self.patch > 0):
            raise ValueError(f'a rig needs 0 < fov < 180 degrees, depth > 0 and patch > 0; got {self}')

    @property
    def num_views(self) -> int:
        return 2

    def text(self) -> str:
        """The rig in words, for titles and labels."""
        turn = f', view 2 turned {math.degrees(math.atan2(self.baseline, self.depth)):.0f} deg' if self.converge else ''
        return f'2 views, fov {self.fov:g}, baseline {self.baseline:g}{turn}, plane at depth {self.depth:g}'


#: the rig the maps use unless told otherwise
RIG = Rig()


def reads_cameras(spec: str) -> bool:
    """Whether any encoding of ``spec`` reads cameras."""
    return any(encoding_class(c['type']).needs_cameras for c in normalize_spec(spec))


def why_not_on_rig(spec: str) -> str | None:
    """Why ``spec`` (with a camera encoding) cannot be drawn on the rig, as the multi-view transformer refuses it:
    an encoding of other than 2-D positions or needing hooks the transformer does not serve; None when it can."""
    served = MODELS.get(
        'MultiViewTransformer'
    ).supported_hooks  # through the registry: evaluation sits beside backbones
    for cfg in normalize_spec(spec):
        cls = encoding_class(cfg['type'])
        needs = cls.hooks() - cls.option_hooks - served
        if 2 not in cls.ndims or needs:
            what = f'needs the {sorted(needs)} hooks' if needs else 'is not for 2-D positions'
            return (
                f'{cfg["type"]} {what}, which views with cameras do not serve (the multi-view transformer refuses it '
                'too); draw the camera encodings alone or with embed and rotate encodings'
            )
    return None


def rig_cameras(size: Sequence[int], rig: Rig = RIG) -> tuple[torch.Tensor, torch.Tensor]:
    """(K (1, 2, 3, 3), cam_to_world (1, 2, 4, 4)) float32 of the rig for an h x w token grid per view."""
    h, w = size
    focal = (w * rig.patch / 2) / math.tan(math.radians(rig.fov) / 2)
    K = geometry.intrinsics(focal, h * rig.patch, w * rig.patch).expand(1, 2, 3, 3)
    eyes = torch.tensor([[0.0, 0.0, 0.0], [rig.baseline, 0.0, 0.0]])
    ahead = torch.tensor([0.0, 0.0, rig.depth])
    targets = torch.stack([ahead, ahead if rig.converge else eyes[1] + ahead])
    up = torch.tensor([0.0, -1.0, 0.0])  # OpenCV: y points down, so the image's up is -y
    return K.contiguous(), geometry.look_at(eyes, targets, up)[None]


def plane_depths(K: torch.Tensor, cam_to_world: torch.Tensor, size: Sequence[int], rig: Rig = RIG) -> torch.Tensor:
    """(1, V, h, w) camera-frame depth of the plane z = ``rig.depth`` along each token's patch-centre ray."""
    h, w = size
    uv = geometry.pixel_centres(h, w, stride=rig.patch)
    origin, direction = geometry.rays(K, cam_to_world, uv)
    along = (rig.depth - origin[..., 2:]) / direction[..., 2:]
    _, depth = geometry.project(K, cam_to_world, origin + along * direction)
    return depth.reshape(1, -1, h, w)


def camera_positions(size: Sequence[int], rig: Rig = RIG, world: torch.Tensor | None = None) -> Positions:
    """Positions of the rig's views for an h x w grid per view, view-major: each token's (row, col) in its view, the
    cameras and the plane's depth per token; ``world`` (4, 4), a rigid transform applied to both cameras (and the
    plane with them, so the depths stay)."""
    h, w = int(size[0]), int(size[1])
    K, poses = rig_cameras((h, w), rig)
    depth = plane_depths(K, poses, (h, w), rig)
    if world is not None:
        poses = world.to(poses.dtype) @ poses
    view = torch.arange(rig.num_views).repeat_interleave(h * w)
    cameras = Cameras(K, poses, view, (h * rig.patch, w * rig.patch), rig.patch, depth)
    coords = grid_coords(h, w).repeat(rig.num_views, 1)
    return Positions(coords=coords, cameras=cameras, key=('multiview', rig.num_views, h, w))


class ViewStack(EncodingStack):
    """An ``EncodingStack`` whose ``embed`` serves views as the multi-view transformer does: a camera encoding sees
    every view's tokens with their cameras, an image encoding each view's grid."""

    __slots__ = ()

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        cameras = pos.cameras
        assert cameras is not None, 'ViewStack needs positions with cameras (camera_positions)'
        (h, w), views = cameras.grid, cameras.num_views
        batch, dim = x.shape[0], x.shape[-1]
        for enc in self.with_hook('embed'):
            if enc.needs_cameras:
                x = enc.embed(x, pos)
            else:
                x = enc.embed(x.reshape(batch * views, h * w, dim), grid_positions(h, w)).reshape(batch, -1, dim)
        return x


def reads_rig(encodings: nn.Module) -> bool:
    """Whether any of ``encodings`` reads cameras (so its maps are drawn on the rig)."""
    return any(type(e).needs_cameras for e in encodings.modules() if isinstance(e, Encoding))


def side_by_side(maps: list[list[list[float]]], views: int) -> list[list[list[float]]]:
    """Maps of (V h, w) rows, view-major, as (h, V w): the views side by side, view 1 on the left."""
    out = []
    for m in maps:
        h = len(m) // views
        out.append([sum((m[v * h + r] for v in range(views)), []) for r in range(h)])
    return out


__all__ = [
    'RIG',
    'Rig',
    'ViewStack',
    'camera_positions',
    'plane_depths',
    'reads_cameras',
    'reads_rig',
    'rig_cameras',
    'side_by_side',
    'why_not_on_rig',
]
