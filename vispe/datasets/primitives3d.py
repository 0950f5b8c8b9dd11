"""Primitives3D: procedural point clouds of open3d's primitive meshes; item ``i`` (class ``i mod num_classes``, scale,
rotation, sample, jitter) depends only on ``(seed, split, i)``."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset

from vispe.datasets.shapes2d import SPLITS
from vispe.optional import require_open3d
from vispe.registry import DATASETS

if TYPE_CHECKING:  # open3d is imported where a cloud is generated: vispe imports without it (vispe.optional)
    import open3d as o3d

    Mesh = o3d.geometry.TriangleMesh

#: class name -> mesh factory (given open3d's TriangleMesh class), sized to fit about the unit cube
PRIMITIVES: dict[str, Callable[[type[Mesh]], Mesh]] = {
    'box': lambda mesh: mesh.create_box(1.0, 0.6, 0.4),
    'sphere': lambda mesh: mesh.create_sphere(0.5, resolution=20),
    'cylinder': lambda mesh: mesh.create_cylinder(0.3, 1.0, resolution=24),
    'cone': lambda mesh: mesh.create_cone(0.45, 1.0, resolution=24),
    'torus': lambda mesh: mesh.create_torus(0.4, 0.12, radial_resolution=30, tubular_resolution=16),
    'tetrahedron': lambda mesh: mesh.create_tetrahedron(0.6),
    'octahedron': lambda mesh: mesh.create_octahedron(0.5),
    'icosahedron': lambda mesh: mesh.create_icosahedron(0.31),
    'mobius': lambda mesh: mesh.create_mobius(
        length_split=60, width_split=6, twists=1, radius=0.4, flatness=1, width=0.3
    ),
    'arrow': lambda mesh: mesh.create_arrow(0.08, 0.16, 0.7, 0.3),
}


@DATASETS.register_module()
class Primitives3D(Dataset):
    """Point clouds of primitive shapes, labelled by shape; items ``{'inputs': FloatTensor (N, 3), 'labels': int}``.

    Args:
        split: 'train', 'val' or 'test' (different objects).
        num_samples: items.
        num_points: N points per cloud.
        seed: non-negative int.
        sampling: 'uniform' (area-weighted) or 'poisson' (Poisson-disk, more even, slower).
        rotation: 'z' (about the vertical axis) or 'so3' (any).
        scale_range: (low, high) of the per-axis random scale factors.
        scale: multiplies every cloud.
        jitter: std of the Gaussian noise per point, in units of the unscaled object.
        cache_dir: keep each generated cloud there as .npy, in a folder named by its settings (before ``scale``).
    """

    classes: tuple[str, ...] = tuple(PRIMITIVES)
    #: how ``tools/infer_points.py`` brings a user's cloud into this data set's frame (objects centred, unit size)
    frame = 'bbox'

    def __init__(
        self,
        split: str = 'train',
        num_samples: int = 2000,
        num_points: int = 1024,
        seed: int = 0,
        sampling: str = 'uniform',
        rotation: str = 'z',
        scale_range: tuple[float, float] = (0.7, 1.3),
        scale: float = 1.0,
        jitter: float = 0.005,
        cache_dir: str | None = None,
    ) -> None:
        require_open3d('Primitives3D')  # now, not in the first item a dataloader worker draws
        if split not in SPLITS:
            raise ValueError(f'unknown split {split!r}; valid splits: {list(SPLITS)}')
        if sampling not in ('uniform', 'poisson'):
            raise ValueError(f"sampling must be 'uniform' or 'poisson', got {sampling!r}")
        if rotation not in ('z', 'so3'):
            raise ValueError(f"rotation must be 'z' or 'so3', got {rotation!r}")
        if num_points < 1 or num_samples < 0 or seed < 0 or scale <= 0:
            raise ValueError('num_points >= 1, num_samples >= 0, seed >= 0 and scale > 0 are needed')
        self.split, self.num_samples, self.num_points, self.seed = split, int(num_samples), int(num_points), int(seed)
        low, high = scale_range
        self.sampling, self.rotation, self.scale_range, self.scale, self.jitter = (
            sampling,
            rotation,
            (low, high),
            float(scale),
            float(jitter),
        )
        self.metainfo = {'classes': self.classes, 'num_classes': len(self.classes)}
        self.cache_dir: str | None = None
        if cache_dir is not None:
            settings = (self.seed, split, self.num_points, sampling, rotation, self.scale_range, self.jitter)
            self.cache_dir = os.path.join(cache_dir, hashlib.sha1(repr(settings).encode()).hexdigest()[:16])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_samples:
            raise IndexError(f'index {index} out of range for {self.num_samples} samples')
        label = index % self.num_classes
        points = self.cached(index) if self.cache_dir else self.generate(index)
        return {'inputs': torch.from_numpy(points * np.float32(self.scale)), 'labels': label}

    def cached(self, index: int) -> np.ndarray:
        """The cloud of ``index`` from the cache, generated and written atomically first when missing."""
        if self.cache_dir is None:
            raise ValueError('Primitives3D.cached needs a data set built with cache_dir')
        path = os.path.join(self.cache_dir, f'{self.split}_{index}.npy')
        if os.path.isfile(path):
            return np.load(path)
        points = self.generate(index)
        os.makedirs(self.cache_dir, exist_ok=True)
        tmp = f'{path}.{os.getpid()}.tmp.npy'
        np.save(tmp, points)
        os.replace(tmp, path)
        return points

    def generate(self, index: int) -> np.ndarray:
        """The (N, 3) float32 cloud of item ``index`` at scale 1."""
        import open3d as o3d

        label = index % self.num_classes
        rng = np.random.default_rng([self.seed, SPLITS[self.split], index])
        mesh = PRIMITIVES[self.classes[label]](o3d.geometry.TriangleMesh)
        mesh.translate(-mesh.get_axis_aligned_bounding_box().get_center())
        o3d.utility.random.seed(int(rng.integers(2**31)))  # open3d's sampler draws from its own global stream
        if self.sampling == 'uniform':
            cloud = mesh.sample_points_uniformly(self.num_points)
        else:
            cloud = mesh.sample_points_poisson_disk(self.num_points)
        points = np.asarray(cloud.points)  # (N, 3)
        points = points * rng.uniform(*self.scale_range, size=3)
        if self.rotation == 'z':
            rot = o3d.geometry.get_rotation_matrix_from_xyz(np.array([0.0, 0.0, rng.uniform(0, 2 * np.pi)]))
        else:  # a normalised Gaussian quaternion is uniform on SO(3)
            quat = rng.normal(size=4)
            rot = o3d.geometry.get_rotation_matrix_from_quaternion(quat / np.linalg.norm(quat))
        return (points @ rot.T + rng.normal(0.0, self.jitter, size=points.shape)).astype(np.float32)


__all__ = ['PRIMITIVES', 'Primitives3D']
