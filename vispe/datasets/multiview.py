"""MultiViewScenes: procedural multi-view scenes ray-cast on the CPU with open3d, for camera-aware encodings, in vispe's
OpenCV camera convention (``vispe.geometry``). Item ``i`` of a split depends only on ``(seed, split, i)``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset

from vispe.datasets.scene2d import ImageSize, as_hw
from vispe.datasets.shapes2d import SPLITS
from vispe.geometry import check_cameras, intrinsics, look_at
from vispe.optional import require_open3d
from vispe.registry import DATASETS

if TYPE_CHECKING:  # open3d is imported where a scene is built: vispe imports without it (vispe.optional)
    import open3d as o3d

    Mesh = o3d.geometry.TriangleMesh
Colour = tuple[float, float, float]

KINDS = ('sphere', 'box', 'cylinder', 'cone')
TARGET_COLOUR: Colour = (1.0, 0.15, 0.15)
#: distractor colours, none of them red: green, blue, yellow, cyan, white
DISTRACTOR_COLOURS: tuple[Colour, ...] = (
    (0.15, 0.8, 0.15),
    (0.15, 0.35, 1.0),
    (0.95, 0.85, 0.1),
    (0.1, 0.85, 0.85),
    (0.9, 0.9, 0.9),
)
BACKGROUND = 0.2
AMBIENT = 0.3
LIGHT_DIRECTION = np.array([0.3, -0.5, 1.0]) / np.linalg.norm([0.3, -0.5, 1.0])  # world frame, towards the light
#: half extents of the box that object centres are drawn in (x, y, z)
PLACEMENT_BOX = (0.8, 0.8, 0.4)
PLACEMENT_TRIES = 100  # draws of a distractor's centre before it is dropped
CAMERA_TRIES = 50  # draws of a camera before it falls back to looking at the target
VIEW_MARGIN = 0.1  # the target's centre must project this fraction of the image size inside its borders


def make_mesh(kind: str, size: float, angle: float = 0.0) -> Mesh:
    """A primitive of ``kind`` and ``size`` (radius or half side; cylinders and cones 2 size high along z), turned by
    ``angle`` about z, its bounding box centred on the origin."""
    require_open3d('make_mesh')
    import open3d as o3d

    shapes = o3d.geometry.TriangleMesh
    if kind == 'sphere':
        mesh = shapes.create_sphere(size, resolution=16)
    elif kind == 'box':
        mesh = shapes.create_box(2 * size, 2 * size, 2 * size)
    elif kind == 'cylinder':
        mesh = shapes.create_cylinder(size, 2 * size, resolution=20)
    elif kind == 'cone':
        mesh = shapes.create_cone(size, 2 * size, resolution=20)
    else:
        raise ValueError(f'unknown object kind {kind!r}; valid kinds: {list(KINDS)}')
    if angle:
        mesh.rotate(o3d.geometry.get_rotation_matrix_from_xyz(np.array([0.0, 0.0, angle])), center=np.zeros(3))
    mesh.translate(-mesh.get_axis_aligned_bounding_box().get_center())  # in place
    return mesh


def _o3d_tensor(array: np.ndarray) -> o3d.core.Tensor:
    import open3d as o3d

    return o3d.core.Tensor(array)  # type: ignore[call-overload]  # open3d's stubs drop the dtype / device defaults


def _extrinsic(cam_to_world: np.ndarray) -> np.ndarray:
    rot, centre = cam_to_world[:3, :3], cam_to_world[:3, 3]
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot.T, -rot.T @ centre
    return out


def _project(K: np.ndarray, cam_to_world: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, float]:
    """Pixel (u, v) and camera-frame depth of one world point (numpy; ``vispe.geometry.project`` in torch)."""
    cam = cam_to_world[:3, :3].T @ (point - cam_to_world[:3, 3])
    return (K[:2, :2] @ cam[:2]) / cam[2] + K[:2, 2], float(cam[2])


def _cast(
    scene: o3d.t.geometry.RaycastingScene,
    colours: np.ndarray,
    K: np.ndarray,
    cam_to_world: np.ndarray,
    height: int,
    width: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Render views of ``scene``: rgb (V, 3, H, W), depth (V, H, W) (0: miss) and geometry ids (V, H, W) (-1: miss)."""
    import open3d as o3d

    rays = np.stack(
        [
            o3d.t.geometry.RaycastingScene.create_rays_pinhole(
                _o3d_tensor(np.asarray(k, dtype=np.float64)),
                _o3d_tensor(_extrinsic(np.asarray(pose, dtype=np.float64))),
                width,
                height,
            ).numpy()
            for k, pose in zip(K, cam_to_world)
        ]
    )  # (V, H, W, 6): origin, direction with camera-frame z = 1
    hits = scene.cast_rays(_o3d_tensor(rays))
    t_hit = hits['t_hit'].numpy()
    ids = hits['geometry_ids'].numpy().astype(np.int64)
    hit = ids != o3d.t.geometry.RaycastingScene.INVALID_ID
    ids[~hit] = -1
    normals = hits['primitive_normals'].numpy()
    normals = np.where((np.sum(normals * rays[..., 3:], axis=-1) > 0)[..., None], -normals, normals)  # face the camera
    shade = AMBIENT + (1.0 - AMBIENT) * np.maximum(normals @ LIGHT_DIRECTION, 0.0)  # (V, H, W)
    palette = np.concatenate([np.asarray(colours, dtype=np.float64).reshape(-1, 3), np.full((1, 3), BACKGROUND)])
    rgb = palette[ids] * np.where(hit, shade, 1.0)[..., None]  # ids -1 picks the background row
    depth = np.where(hit, t_hit, 0.0)  # t along a ray with camera-frame z = 1 is the depth z
    return rgb.transpose(0, 3, 1, 2).astype(np.float32), depth.astype(np.float32), ids


def build_scene(meshes: Sequence[Mesh]) -> o3d.t.geometry.RaycastingScene:
    """A ``RaycastingScene`` of legacy meshes; mesh ``g`` gets geometry id ``g``."""
    require_open3d('rendering MultiViewScenes')
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    for g, mesh in enumerate(meshes):
        gid = scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
        assert gid == g, 'RaycastingScene ids are expected to count from 0'
    return scene


def render(
    meshes_with_colours: Sequence[tuple[Mesh, Colour]],
    K: np.ndarray | torch.Tensor,
    cam_to_world: np.ndarray | torch.Tensor,
    height: int,
    width: int,
    return_ids: bool = False,
) -> tuple[np.ndarray, ...]:
    """Render world-frame ``(legacy TriangleMesh, (r, g, b) in [0, 1])`` pairs with pinhole cameras, ``K`` (3, 3) or
    (V, 3, 3) in pixels and ``cam_to_world`` (4, 4) or (V, 4, 4): rgb float32 (3, H, W) or (V, 3, H, W) in [0, 1]
    (Lambert shading, grey 0.2 background), depth float32 (H, W) or (V, H, W) (camera z, 0 on a miss), and with
    ``return_ids`` each pixel's int64 mesh index (-1: background)."""
    K, cam_to_world = np.asarray(K, dtype=np.float64), np.asarray(cam_to_world, dtype=np.float64)
    single = K.ndim == 2
    if single != (cam_to_world.ndim == 2) or K.shape[-2:] != (3, 3) or cam_to_world.shape[-2:] != (4, 4):
        raise ValueError(
            f'K must be (3, 3) or (V, 3, 3) and cam_to_world the matching (4, 4) or (V, 4, 4), got '
            f'{K.shape} and {cam_to_world.shape}'
        )
    check_cameras(torch.from_numpy(K), torch.from_numpy(cam_to_world))  # the check every camera encoding's input gets
    meshes = [mesh for mesh, _ in meshes_with_colours]
    colours = np.array([colour for _, colour in meshes_with_colours], dtype=np.float64).reshape(-1, 3)
    out = _cast(build_scene(meshes), colours, K.reshape(-1, 3, 3), cam_to_world.reshape(-1, 4, 4), height, width)
    out = tuple(x[0] for x in out) if single else out
    return out if return_ids else out[:2]


def _check_range(name: str, value: Sequence[float], low: float, high: float) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f'{name} must be a (min, max) pair of numbers, got {value!r}') from None
    if not low < lo <= hi < high:
        raise ValueError(f'{name} must be (min, max) with {low} < min <= max < {high}, got {value!r}')
    return lo, hi


@DATASETS.register_module()
class MultiViewScenes(Dataset):
    """Multi-view renders of primitive objects; the task is to regress the red object's 3D world position. Sizes,
    focal lengths and poses are random, so a model must use ``K`` and ``cam_to_world`` and combine the views; every
    camera sees the target's centre. Items: ``'inputs'`` (V, 3, H, W) RGB in [0, 1], ``'depth'`` (V, 1, H, W)
    (0: background), ``'K'`` (V, 3, 3), ``'cam_to_world'`` (V, 4, 4), ``'target'`` (3,), all float32.

    Args:
        split: 'train', 'val' or 'test' (different scenes).
        num_samples: items.
        num_views: V cameras per scene.
        image_size: int or (H, W).
        seed: non-negative int.
        num_objects: (min, max) objects per scene, target included; at most 6.
        fov_range: horizontal field of view in degrees, per view: focal = (W / 2) / tan(fov / 2).
        distance_range: camera distance from its look-at point.
        elevation_range: degrees above the horizontal (world +z up); azimuths are uniform.
        look_jitter: std of each camera's look-at offset from the origin.
        size_range: object size (radius or half side).
    """

    def __init__(
        self,
        split: str = 'train',
        num_samples: int = 2000,
        num_views: int = 2,
        image_size: ImageSize = 32,
        seed: int = 0,
        num_objects: tuple[int, int] = (1, 3),
        fov_range: tuple[float, float] = (40.0, 70.0),
        distance_range: tuple[float, float] = (3.0, 4.5),
        elevation_range: tuple[float, float] = (15.0, 55.0),
        look_jitter: float = 0.15,
        size_range: tuple[float, float] = (0.2, 0.45),
    ) -> None:
        require_open3d('MultiViewScenes')  # now, not in the first item a dataloader worker draws
        if split not in SPLITS:
            raise ValueError(f'unknown split {split!r}; valid splits: {list(SPLITS)}')
        if int(num_samples) != num_samples or num_samples < 0 or int(seed) != seed or seed < 0:
            raise ValueError(f'num_samples and seed must be non-negative ints, got {num_samples!r} and {seed!r}')
        if int(num_views) != num_views or num_views < 1:
            raise ValueError(f'num_views must be an int >= 1, got {num_views!r}')
        max_objects = 1 + len(DISTRACTOR_COLOURS)
        counts = tuple(num_objects) if isinstance(num_objects, (tuple, list)) else ()
        valid = len(counts) == 2 and all(isinstance(n, int) for n in counts)
        if not valid or not 1 <= counts[0] <= counts[1] <= max_objects:
            raise ValueError(
                f'num_objects must be (min, max) ints with 1 <= min <= max <= {max_objects}, got {num_objects!r}'
            )
        if not look_jitter >= 0:
            raise ValueError(f'look_jitter must be >= 0, got {look_jitter!r}')
        self.split, self.num_samples, self.num_views, self.seed = split, int(num_samples), int(num_views), int(seed)
        self.image_size = as_hw(image_size)
        self.num_objects = (int(num_objects[0]), int(num_objects[1]))
        self.fov_range = _check_range('fov_range (degrees)', fov_range, 0.0, 180.0)
        self.distance_range = _check_range('distance_range', distance_range, 0.0, math.inf)
        self.elevation_range = _check_range('elevation_range (degrees)', elevation_range, -90.0, 90.0)
        self.size_range = _check_range('size_range', size_range, 0.0, math.inf)
        self.look_jitter = float(look_jitter)
        self.metainfo = {'num_views': self.num_views, 'image_size': self.image_size}

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_samples:
            raise IndexError(f'index {index} out of range for {self.num_samples} samples')
        rng = np.random.default_rng([self.seed, SPLITS[self.split], index])
        meshes, colours, target = self.objects(rng)
        height, width = self.image_size
        scene = build_scene(meshes)
        K = np.zeros((self.num_views, 3, 3), np.float32)
        poses = np.zeros((self.num_views, 4, 4), np.float32)
        for v in range(self.num_views):
            K[v], poses[v] = self.camera(rng, target)
        rgb, depth, ids = _cast(scene, colours, K, poses, height, width)
        for _ in range(CAMERA_TRIES):  # re-draw the cameras that see no red pixel (the target is hidden)
            hidden = np.flatnonzero(~(ids == 0).any(axis=(1, 2)))
            if not len(hidden):
                break
            for view in hidden:
                K[view], poses[view] = self.camera(rng, target)
            rgb[hidden], depth[hidden], ids[hidden] = _cast(scene, colours, K[hidden], poses[hidden], height, width)
        return {
            'inputs': torch.from_numpy(rgb),
            'depth': torch.from_numpy(depth[:, None]),
            'K': torch.from_numpy(K),
            'cam_to_world': torch.from_numpy(poses),
            'target': torch.from_numpy(target.astype(np.float32)),
        }

    def objects(self, rng: np.random.Generator) -> tuple[list[o3d.geometry.TriangleMesh], np.ndarray, np.ndarray]:
        """World-frame meshes (the target first), their colours (N, 3) and the target's bounding-box centre (3,)."""
        count = int(rng.integers(self.num_objects[0], self.num_objects[1] + 1))
        kinds = rng.integers(len(KINDS), size=count)
        sizes = rng.uniform(*self.size_range, size=count)
        angles = rng.uniform(0.0, 2 * np.pi, size=count)
        palette = rng.permutation(len(DISTRACTOR_COLOURS))
        box = np.array(PLACEMENT_BOX)
        meshes: list[o3d.geometry.TriangleMesh] = []
        colours: list[Colour] = []
        centres: list[np.ndarray] = []
        radii: list[float] = []
        for n in range(count):
            mesh = make_mesh(KINDS[kinds[n]], float(sizes[n]), float(angles[n]))
            radius = float(np.linalg.norm(np.asarray(mesh.vertices), axis=1).max())  # bounding sphere about centre
            for _ in range(PLACEMENT_TRIES):
                centre = rng.uniform(-box, box)
                if all(np.linalg.norm(centre - c) >= radius + r for c, r in zip(centres, radii)):
                    break
            else:  # no room left: drop this distractor (never the target, which is placed first)
                continue
            mesh.translate(centre)
            meshes.append(mesh)
            colours.append(TARGET_COLOUR if n == 0 else DISTRACTOR_COLOURS[palette[n - 1]])
            centres.append(centre)
            radii.append(radius)
        return meshes, np.array(colours), centres[0]

    def camera(self, rng: np.random.Generator, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A random camera (K, cam_to_world) whose image holds the target's centre ``VIEW_MARGIN`` inside its borders
        (else it looks straight at the target)."""
        height, width = self.image_size
        bounds = np.array([width, height]) * VIEW_MARGIN, np.array([width, height]) * (1 - VIEW_MARGIN)
        for attempt in range(CAMERA_TRIES + 1):
            azimuth = rng.uniform(0.0, 2 * np.pi)
            elevation = np.radians(rng.uniform(*self.elevation_range))
            distance = rng.uniform(*self.distance_range)
            fov = np.radians(rng.uniform(*self.fov_range))
            look = rng.normal(0.0, self.look_jitter, size=3) if attempt < CAMERA_TRIES else target
            direction = np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), 0.0])
            direction[2] = np.sin(elevation)
            eye = look + distance * direction
            pose_t = look_at(torch.from_numpy(eye), torch.from_numpy(np.asarray(look, dtype=np.float64)))
            pose = pose_t.numpy().astype(np.float32)
            K = intrinsics((width / 2) / math.tan(fov / 2), height, width).numpy()
            uv, z = _project(K.astype(np.float64), pose.astype(np.float64), target)
            if z > 0 and np.all(uv >= bounds[0]) and np.all(uv <= bounds[1]):
                break
        return K, pose


__all__ = ['DISTRACTOR_COLOURS', 'KINDS', 'TARGET_COLOUR', 'MultiViewScenes', 'build_scene', 'make_mesh', 'render']
