"""Primitives3D: procedural point clouds of open3d primitive meshes."""

from __future__ import annotations

import pytest
import torch

from vispe.datasets import Primitives3D
from vispe.registry import DATASETS


def test_deterministic_from_seed_split_and_index() -> None:
    a, b = Primitives3D(num_samples=12, seed=3), Primitives3D(num_samples=12, seed=3)
    assert all(torch.equal(a[i]['inputs'], b[i]['inputs']) for i in (0, 5, 11))
    other_seed, other_split = Primitives3D(num_samples=12, seed=4), Primitives3D(split='val', num_samples=12, seed=3)
    assert not torch.equal(a[5]['inputs'], other_seed[5]['inputs'])
    assert not torch.equal(a[5]['inputs'], other_split[5]['inputs'])


@pytest.mark.parametrize('sampling,rotation', [('uniform', 'z'), ('poisson', 'so3')])
def test_every_class_is_generated_about_the_unit_cube(sampling: str, rotation: str) -> None:
    ds = Primitives3D(num_samples=len(Primitives3D.classes), num_points=256, sampling=sampling, rotation=rotation)
    labels = []
    for i in range(len(ds)):
        item = ds[i]
        points = item['inputs']
        assert points.shape == (256, 3) and points.dtype == torch.float32 and torch.isfinite(points).all()
        extent = points.amax(0) - points.amin(0)
        assert 0.15 < extent.max() < 2.5, (ds.classes[item['labels']], extent)  # centred primitives about 1 wide
        assert points.mean(0).abs().max() < 0.5
        labels.append(item['labels'])
    assert sorted(labels) == list(range(ds.num_classes)) and ds.num_classes == 10


def test_scale_multiplies_the_cloud_and_z_rotation_keeps_heights() -> None:
    base, big = Primitives3D(num_samples=4, jitter=0.0), Primitives3D(num_samples=4, jitter=0.0, scale=2.0)
    assert torch.allclose(big[2]['inputs'], 2 * base[2]['inputs'], atol=1e-5)
    # rotation about z keeps the box's centred top and bottom faces level: z spans [-h, h] with h = 0.2 x scale
    z = base[0]['inputs'][:, 2]  # index 0: the box, 0.4 high before the random per-axis scale in [0.7, 1.3]
    assert torch.allclose(z.max(), -z.min(), atol=1e-5) and 0.7 * 0.2 - 1e-5 <= z.max() <= 1.3 * 0.2 + 1e-5
    assert (z > z.max() - 1e-5).sum() > 50  # the top face is flat: many points at the same height


def test_bad_arguments_and_registry() -> None:
    with pytest.raises(ValueError, match='unknown split'):
        Primitives3D(split='dev')
    with pytest.raises(ValueError, match="'uniform' or 'poisson'"):
        Primitives3D(sampling='grid')
    assert isinstance(DATASETS.build(dict(type='Primitives3D', num_samples=2)), Primitives3D)


def test_disk_cache_returns_the_generated_clouds_and_is_read_back(tmp_path) -> None:
    import numpy as np

    plain = Primitives3D('val', num_samples=3, num_points=64, scale=1.5)
    cached = Primitives3D('val', num_samples=3, num_points=64, scale=1.5, cache_dir=str(tmp_path))
    for i in range(3):
        assert torch.equal(cached[i]['inputs'], plain[i]['inputs']) and cached[i]['labels'] == plain[i]['labels']
    files = sorted(p.name for p in tmp_path.rglob('*.npy'))
    assert files == ['val_0.npy', 'val_1.npy', 'val_2.npy']  # no temporary files left
    # the second read comes from the file: overwrite one and see it
    (path,) = tmp_path.rglob('val_1.npy')
    np.save(path, np.zeros((64, 3), dtype=np.float32))
    assert torch.equal(cached[1]['inputs'], torch.zeros(64, 3))
    # other settings that shape a cloud get their own folder; scale does not
    Primitives3D('val', num_samples=1, num_points=32, cache_dir=str(tmp_path))[0]
    Primitives3D('val', num_samples=1, num_points=64, scale=2.0, cache_dir=str(tmp_path))[0]
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
