"""Reading a user's point clouds and meshes through open3d, and bringing them to a data set's frame.

``read_points(path)`` takes the point-cloud formats open3d reads (.ply, .pcd, .xyz, .xyzn, .xyzrgb, .pts) and
meshes (.off, .obj, .stl, .gltf, .glb; a .ply without vertices-only content is read as a point cloud first), whose
surface is sampled. ``resample`` picks a fixed number of points (farthest-point via open3d, or seeded random), and
``unit_sphere`` centres a cloud and scales it into the unit ball (ModelNet40's usual normalisation).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from vispe.datasets.samples import SKIP_HINT, SampleError, check_ply, finite_points
from vispe.files import check_file, files_inside
from vispe.optional import require_open3d

POINT_CLOUD_SUFFIXES = ('.ply', '.pcd', '.xyz', '.xyzn', '.xyzrgb', '.pts')
MESH_SUFFIXES = ('.off', '.obj', '.stl', '.gltf', '.glb', '.ply')
#: points sampled from a mesh's surface before ``resample`` picks the final count
MESH_SAMPLES = 8192


def read_points(path: str, mesh_samples: int = MESH_SAMPLES, seed: int = 0) -> np.ndarray:
    """(N, 3) float32 points of a point-cloud file, or ``mesh_samples`` points sampled uniformly (area-weighted,
    seeded) from a mesh file's surface. Raises FileNotFoundError / ValueError naming the file and what to do."""
    check_file(
        path,
        'point-cloud file',
        f'no such point-cloud file: {path}',
        lambda d: files_inside(d, POINT_CLOUD_SUFFIXES + MESH_SUFFIXES, 'point clouds'),
    )
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in POINT_CLOUD_SUFFIXES + MESH_SUFFIXES:
        raise ValueError(
            f'{path}: unsupported file type {suffix!r}; point clouds: {", ".join(POINT_CLOUD_SUFFIXES)}; '
            f'meshes: {", ".join(MESH_SUFFIXES)}'
        )
    require_open3d(f'reading {path}')
    import open3d as o3d

    if suffix == '.ply':
        check_ply(path)  # open3d fills a truncated file's missing points with zeros and only prints a warning
    if suffix in POINT_CLOUD_SUFFIXES:
        cloud = o3d.io.read_point_cloud(Path(path), remove_nan_points=False, remove_infinite_points=False)
        if cloud.has_points():
            return finite_points(np.asarray(cloud.points, dtype=np.float32), path)
    if suffix in MESH_SUFFIXES:
        mesh = o3d.io.read_triangle_mesh(Path(path))
        if mesh.has_triangles():
            finite_points(np.asarray(mesh.vertices), path)
            o3d.utility.random.seed(seed)
            return np.asarray(mesh.sample_points_uniformly(mesh_samples).points, dtype=np.float32)
    raise SampleError(f'{path}: open3d read no points (an empty or unreadable {suffix} file); {SKIP_HINT}')


def resample(points: np.ndarray, num: int, method: str = 'fps', seed: int = 0) -> np.ndarray:
    """``num`` of the (N, 3) points: 'fps' (open3d's farthest-point down-sampling, from point 0), 'random' (a
    seeded subset) or 'first'. With fewer than ``num`` points, points are repeated (seeded) to reach ``num``."""
    if method not in ('fps', 'random', 'first'):
        raise ValueError(f"resample method must be 'fps', 'random' or 'first', got {method!r}")
    n = len(points)
    if n == 0:
        raise ValueError('cannot resample an empty point cloud')
    rng = np.random.default_rng(seed)
    if n < num:
        return np.concatenate([points, points[rng.integers(n, size=num - n)]]).astype(np.float32)
    if n == num or method == 'first':
        return points[:num].astype(np.float32)
    if method == 'random':
        return points[np.sort(rng.choice(n, size=num, replace=False))].astype(np.float32)
    require_open3d("resample(method='fps')")
    import open3d as o3d

    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.astype(np.float64)))
    return np.asarray(cloud.farthest_point_down_sample(num).points, dtype=np.float32)


def unit_sphere(points: np.ndarray) -> np.ndarray:
    """Centre on the centroid and scale so the farthest point is at distance 1."""
    centred = points - points.mean(axis=0, keepdims=True)
    radius = float(np.linalg.norm(centred, axis=1).max())
    return (centred / radius if radius > 0 else centred).astype(np.float32)


def center(points: np.ndarray, frame: str | None) -> np.ndarray:
    """``frame``: None or 'none' (as read), 'bbox' (centre of the bounding box at 0), 'unit_sphere'."""
    if frame in (None, 'none'):
        return points.astype(np.float32)
    if frame == 'bbox':
        return (points - (points.min(0) + points.max(0)) / 2).astype(np.float32)
    if frame == 'unit_sphere':
        return unit_sphere(points)
    raise ValueError(f"frame must be 'none', 'bbox' or 'unit_sphere', got {frame!r}")


__all__ = ['MESH_SUFFIXES', 'POINT_CLOUD_SUFFIXES', 'center', 'read_points', 'resample', 'unit_sphere']
