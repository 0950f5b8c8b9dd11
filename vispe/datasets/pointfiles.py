"""Reading a user's point clouds and meshes through open3d (and ModelNet40's .txt), and bringing them to a data set's
frame: ``read_points``, ``resample``, ``unit_sphere``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from vispe.datasets.samples import SKIP_HINT, SampleError, check_ply, finite_points
from vispe.files import check_file, files_inside
from vispe.optional import require_open3d

POINT_CLOUD_SUFFIXES = ('.ply', '.pcd', '.xyz', '.xyzn', '.xyzrgb', '.pts')
#: point clouds as comma-separated text, which vispe reads itself (ModelNet40's x,y,z,nx,ny,nz files)
CSV_CLOUD_SUFFIXES = ('.txt',)
MESH_SUFFIXES = ('.off', '.obj', '.stl', '.gltf', '.glb', '.ply')
#: points sampled from a mesh's surface before ``resample`` picks the final count
MESH_SAMPLES = 8192
#: the text point-cloud formats open3d reads, with the numbers each line holds (x y z first; .pts may add
#: intensity and colour, and open3d takes the first three numbers of an .xyz line)
TEXT_COLUMNS = {'.xyz': (3, None), '.xyzn': (6, 6), '.xyzrgb': (6, 6), '.pts': (3, 7)}


def check_text_points(path: str, suffix: str) -> None:
    """SampleError naming the file and line of a text point cloud whose lines are not rows of one count of numbers."""
    low, high = TEXT_COLUMNS[suffix]
    if high is None:
        want = f'at least {low} numbers'
    else:
        want = f'{low} numbers' if low == high else f'{low} to {high} numbers'
    columns = None
    with open(path, errors='replace') as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields or fields[0].startswith('#'):
                continue
            if suffix == '.pts' and number == 1 and len(fields) == 1 and fields[0].isdigit():
                continue
            try:
                [float(x) for x in fields]
                numeric = True
            except ValueError:
                numeric = False
            bad = not numeric or len(fields) < low or (high is not None and len(fields) > high)
            if bad or (columns is not None and len(fields) != columns):
                got = f'{len(fields)} columns' if numeric else 'text that is not a number'
                want_here = f'{want} (x y z first)' if bad else f'{columns} numbers like the lines before it'
                raise SampleError(
                    f'{path}, line {number}: a {suffix} line holds {want_here}, got {got}: {line.strip()[:60]!r}; '
                    f'{SKIP_HINT}'
                )
            columns = len(fields)


def read_text_cloud(path: str) -> np.ndarray:
    """(N, 3) float32 xyz of a ``x,y,z[,nx,ny,nz]`` text file, comma or space separated (ModelNet40's .txt)."""
    with open(path) as f:
        text = f.read()
    first = text.lstrip().split('\n', 1)[0]
    width = len(first.replace(',', ' ').split())
    try:
        values = np.array(text.replace(',', ' ').split(), dtype=np.float32)
    except ValueError:  # a word that is not a number
        values = np.zeros(0, dtype=np.float32)
    if width < 3 or values.size == 0 or values.size % width:
        raise SampleError(f'{path}: expected lines of x,y,z[,nx,ny,nz] numbers (truncated or not a point file)')
    return finite_points(values.reshape(-1, width)[:, :3].copy(), path)


def read_points(path: str, mesh_samples: int = MESH_SAMPLES, seed: int = 0) -> np.ndarray:
    """(N, 3) float32 points of a point-cloud file, or ``mesh_samples`` seeded area-weighted samples of a mesh's
    surface; FileNotFoundError / ValueError naming the file."""
    check_file(
        path,
        'point-cloud file',
        f'no such point-cloud file: {path}',
        lambda d: files_inside(d, POINT_CLOUD_SUFFIXES + CSV_CLOUD_SUFFIXES + MESH_SUFFIXES, 'point clouds'),
    )
    suffix = os.path.splitext(path)[1].lower()
    if suffix in CSV_CLOUD_SUFFIXES:
        return read_text_cloud(path)
    if suffix not in POINT_CLOUD_SUFFIXES + MESH_SUFFIXES:
        raise ValueError(
            f'{path}: unsupported file type {suffix!r}; point clouds: '
            f'{", ".join(POINT_CLOUD_SUFFIXES + CSV_CLOUD_SUFFIXES)}; meshes: {", ".join(MESH_SUFFIXES)}'
        )
    require_open3d(f'reading {path}')
    import open3d as o3d

    if suffix in TEXT_COLUMNS:
        check_text_points(path, suffix)  # open3d reads what it can of each line: a malformed file is one point, or none
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
    """``num`` of the (N, 3) points: 'fps' (from point 0), 'random' (seeded) or 'first'; too few are repeated."""
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
    picked = np.asarray(cloud.farthest_point_down_sample(num).points, dtype=np.float32)
    if len(picked) < num:  # a cloud of few distinct points (one point repeated): FPS stops early; repeat them
        picked = np.concatenate([picked, picked[rng.integers(len(picked), size=num - len(picked))]])
    return picked


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


__all__ = [
    'CSV_CLOUD_SUFFIXES',
    'MESH_SUFFIXES',
    'POINT_CLOUD_SUFFIXES',
    'TEXT_COLUMNS',
    'center',
    'check_text_points',
    'read_points',
    'read_text_cloud',
    'resample',
    'unit_sphere',
]
