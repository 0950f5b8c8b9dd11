"""Point clouds from disk: ModelNet40 in both layouts, and a user's .ply / .pcd / mesh files through open3d."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from conftest import needs_open3d

from vispe.datasets import ModelNet40
from vispe.datasets.pointfiles import center, read_points, read_text_cloud, resample, unit_sphere
from vispe.datasets.samples import SampleWarning

o3d = needs_open3d()


def write_text_layout(root, classes=('chair', 'lamp'), per_class=3, points=300) -> None:
    rng = np.random.default_rng(0)
    os.makedirs(root)
    with open(os.path.join(root, 'modelnet40_shape_names.txt'), 'w') as f:
        f.write('\n'.join(classes) + '\n')
    for split, ids in (('train', range(1, per_class + 1)), ('test', range(per_class + 1, per_class + 2))):
        names = [f'{c}_{i:04d}' for c in classes for i in ids]
        with open(os.path.join(root, f'modelnet40_{split}.txt'), 'w') as f:
            f.write('\n'.join(names) + '\n')
        for name in names:
            cls = name.rsplit('_', 1)[0]
            os.makedirs(os.path.join(root, cls), exist_ok=True)
            np.savetxt(os.path.join(root, cls, f'{name}.txt'), rng.normal(5.0, 2.0, (points, 6)), delimiter=',')


def test_text_layout_reads_labels_and_normalises_into_the_unit_sphere(tmp_path) -> None:
    root = str(tmp_path / 'modelnet40_normal_resampled')
    write_text_layout(root)
    train = ModelNet40(root, split='train', num_points=128)
    assert train.layout == 'text' and train.classes == ('chair', 'lamp') and len(train) == 6
    assert [train[i]['labels'] for i in range(6)] == [0, 0, 0, 1, 1, 1]
    cloud = train[4]['inputs']
    assert cloud.shape == (128, 3) and cloud.dtype == torch.float32
    assert torch.allclose(cloud.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.isclose(cloud.norm(dim=1).max(), torch.tensor(1.0))
    assert torch.equal(train[4]['inputs'], cloud)  # deterministic
    test = ModelNet40(root, split='val', num_points=64, scale=2.0)  # 'val' reads the test split
    assert len(test) == 2 and torch.isclose(test[0]['inputs'].norm(dim=1).max(), torch.tensor(2.0))
    raw = read_text_cloud(os.path.join(root, 'chair', 'chair_0001.txt'))
    assert raw.shape == (300, 3)


def test_mesh_layout_samples_off_files(tmp_path) -> None:
    Mesh = o3d.geometry.TriangleMesh
    for cls, mesh in (('box', Mesh.create_box()), ('cone', Mesh.create_cone())):
        for split in ('train', 'test'):
            os.makedirs(tmp_path / cls / split)
            assert o3d.io.write_triangle_mesh(str(tmp_path / cls / split / f'{cls}_0001.off'), mesh)
    data = ModelNet40(str(tmp_path), split='test', num_points=256)
    assert data.layout == 'mesh' and data.classes == ('box', 'cone') and len(data) == 2
    box = data[0]['inputs'].numpy()
    # a box's surface points all lie on one of its faces: on some axis, at that axis' minimum or maximum
    on_face = np.isclose(box, box.min(0), atol=1e-4) | np.isclose(box, box.max(0), atol=1e-4)
    assert on_face.any(axis=1).all()


def test_clouds_with_far_fewer_points_are_warned_about_once(tmp_path) -> None:
    """ModelNet40 resamples a cloud with fewer points than num_points by repeating points: under half of the asked
    count (so most served points are repeats), it says so, naming the file, once however often it is loaded."""
    root = str(tmp_path / 'mn')
    write_text_layout(root, per_class=1, points=300)
    np.savetxt(os.path.join(root, 'lamp', 'lamp_0001.txt'), np.random.default_rng(0).random((20, 6)), delimiter=',')
    np.savetxt(os.path.join(root, 'chair', 'chair_0001.txt'), np.random.default_rng(1).random((40, 6)), delimiter=',')
    data = ModelNet40(root, split='train', num_points=64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(3):
            clouds = [data[i]['inputs'] for i in range(len(data))]
    messages = [str(w.message) for w in caught if issubclass(w.category, SampleWarning)]
    assert all(c.shape == (64, 3) for c in clouds)
    assert len(messages) == 1, messages  # 40 of 64 (most of them the file's own) is not warned about
    assert 'lamp_0001.txt: 20 points, far fewer than the 64 asked for (num_points): 44 of them' in messages[0]


def test_meshes_are_sampled_densely_enough_for_num_points(tmp_path) -> None:
    """A mesh was sampled at 8192 surface points whatever num_points was: 9000 points had 808 repeats."""
    os.makedirs(tmp_path / 'box' / 'test')
    assert o3d.io.write_triangle_mesh(
        str(tmp_path / 'box' / 'test' / 'box_0001.off'), o3d.geometry.TriangleMesh.create_box()
    )
    data = ModelNet40(str(tmp_path), split='test', num_points=9000, sample='first')
    with warnings.catch_warnings():
        warnings.simplefilter('error', SampleWarning)
        cloud = data[0]['inputs']
    assert cloud.shape == (9000, 3) and len(np.unique(cloud.numpy(), axis=0)) == 9000


def test_missing_modelnet_names_the_expected_paths(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r'modelnet40_shape_names\.txt.*<class>/\{train,test\}/\*\.off'):
        ModelNet40(str(tmp_path / 'nowhere'))


def test_read_ply_pcd_and_mesh_files(tmp_path) -> None:
    rng = np.random.default_rng(1)
    xyz = rng.normal(size=(500, 3))
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(xyz))
    for suffix in ('.ply', '.pcd'):
        path = str(tmp_path / f'cloud{suffix}')
        assert o3d.io.write_point_cloud(path, cloud)
        assert np.allclose(read_points(path), xyz, atol=1e-5)
    mesh_path = str(tmp_path / 'sphere.off')
    o3d.io.write_triangle_mesh(mesh_path, o3d.geometry.TriangleMesh.create_sphere(2.0, resolution=30))
    surface = read_points(mesh_path, mesh_samples=1000)
    assert surface.shape == (1000, 3) and np.allclose(np.linalg.norm(surface, axis=1), 2.0, atol=0.05)
    with pytest.raises(FileNotFoundError, match='no such point-cloud file'):
        read_points(str(tmp_path / 'missing.ply'))
    (tmp_path / 'notes.doc').write_text('hello')
    with pytest.raises(ValueError, match=r"unsupported file type '\.doc'; point clouds: \.ply.*\.txt; meshes"):
        read_points(str(tmp_path / 'notes.doc'))
    (tmp_path / 'notes.txt').write_text('hello')  # a .txt is read as ModelNet40's comma-separated points
    with pytest.raises(ValueError, match=r'notes\.txt: expected lines of x,y,z\[,nx,ny,nz\] numbers'):
        read_points(str(tmp_path / 'notes.txt'))
    (tmp_path / 'empty.pcd').write_text('')
    with pytest.raises(ValueError, match='read no points'):
        read_points(str(tmp_path / 'empty.pcd'))


def test_resample_and_frames() -> None:
    rng = np.random.default_rng(2)
    xyz = rng.uniform(-1, 1, (400, 3)).astype(np.float32) + 3.0
    fps = resample(xyz, 32, 'fps')
    assert fps.shape == (32, 3) and len({tuple(p) for p in fps.tolist()}) == 32
    assert np.allclose(fps[0], xyz[0])  # open3d starts from the first point
    assert resample(xyz, 32, 'random', seed=1).shape == (32, 3)
    assert np.array_equal(resample(xyz, 32, 'first'), xyz[:32])
    assert resample(xyz[:10], 32).shape == (32, 3)  # too few: points repeat
    sphere = unit_sphere(xyz)
    assert np.allclose(sphere.mean(0), 0, atol=1e-5) and np.isclose(np.linalg.norm(sphere, axis=1).max(), 1.0)
    boxed = center(xyz, 'bbox')
    assert np.allclose(boxed.min(0), -boxed.max(0), atol=1e-5)
    with pytest.raises(ValueError, match="frame must be 'none', 'bbox' or 'unit_sphere'"):
        center(xyz, 'origin')
