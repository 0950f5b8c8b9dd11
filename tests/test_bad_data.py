"""Bad data on disk: a corrupt or truncated image in an ImageFolder, a truncated .ply, NaN point coordinates and a
missing data root each raise an error naming the file and what is wrong; with on_error='skip' the sample is
skipped with a warning and counted, and the Runner reports the count."""

from __future__ import annotations

import io
import itertools
import logging
import warnings

import numpy as np
import pytest
import torch
from conftest import needs_open3d
from PIL import Image

from vispe.datasets import CIFAR10Dataset, ImageFolderDataset, ModelNet40
from vispe.datasets.pointfiles import read_points
from vispe.datasets.samples import SampleError, check_ply


def image_tree(root, bad: dict | None = None, per_class: int = 4):
    """root/train/{a,b}/i.png, 8x8 RGB; ``bad`` maps a relative path to the bytes written there instead."""
    for cls in ('a', 'b'):
        (root / 'train' / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.new('RGB', (8, 8), (40 * i, 100, 200)).save(root / 'train' / cls / f'{i}.png')
    for rel, data in (bad or {}).items():
        (root / 'train' / rel).write_bytes(data)
    return root


def truncated_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, 'JPEG')
    return buf.getvalue()[: len(buf.getvalue()) // 2]


@pytest.mark.parametrize(
    'data, words', [(b'not an image at all', 'cannot identify'), (truncated_jpeg(), 'truncated')], ids=['junk', 'cut']
)
def test_bad_image_names_the_file(tmp_path, data, words) -> None:
    root = image_tree(tmp_path, {'a/9.jpg': data})
    dataset = ImageFolderDataset(root, image_size=8)
    index = [p for p, _ in dataset.base.samples].index(str(root / 'train' / 'a' / '9.jpg'))
    with pytest.raises(SampleError, match=rf'9\.jpg: unreadable image \(.*{words}.*on_error=.skip.'):
        dataset[index]
    assert dataset[0]['inputs'].shape == (3, 8, 8)  # the good ones still load


def test_bad_images_are_skipped_and_counted_when_asked(tmp_path) -> None:
    root = image_tree(tmp_path, {'a/8.png': b'junk', 'a/9.jpg': truncated_jpeg()})
    dataset = ImageFolderDataset(root, image_size=8, on_error='skip')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        items = [dataset[i] for i in range(len(dataset))]
    assert len(items) == 10 and all(item['inputs'].shape == (3, 8, 8) for item in items)
    assert len(dataset.skipped) == 2 and all('unreadable image' in v for v in dataset.skipped.values())
    messages = [str(w.message) for w in caught]
    assert any('8.png' in m and '1 skipped so far' in m for m in messages)
    assert any('9.jpg' in m and '2 skipped so far' in m for m in messages)
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        ImageFolderDataset(root, image_size=8, on_error='ignore')


@pytest.mark.parametrize('on_error', ['raise', 'skip'])
def test_iterating_a_data_set_ends_after_its_last_sample(tmp_path, on_error) -> None:
    """An index past the end raises IndexError (which ends ``for sample in dataset``), under 'skip' too, whose
    wrapping to the next readable sample stays inside the data set."""
    dataset = ImageFolderDataset(image_tree(tmp_path), image_size=8, on_error=on_error)
    assert len(list(itertools.islice(dataset, 20))) == len(dataset) == 8  # islice: a wrapping data set would not end
    assert torch.equal(dataset[-1]['inputs'], dataset[7]['inputs'])
    with pytest.raises(IndexError, match='sample index 8 is out of range for a data set of 8 samples'):
        dataset[8]


def test_skips_in_data_loader_workers_reach_the_main_process(tmp_path) -> None:
    """num_workers=2: the workers skip the bad images; the main process's ``skipped`` lists both, with the files'
    reasons, and the data set served only good images."""
    root = image_tree(tmp_path, {'a/8.png': b'junk', 'b/9.jpg': truncated_jpeg()})
    dataset = ImageFolderDataset(root, image_size=8, on_error='skip')
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, num_workers=2, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the workers' warnings go to their own stderr
        batches = list(loader)
    assert sum(len(b['labels']) for b in batches) == len(dataset) == 10
    assert not dataset._skip_reasons, 'nothing was loaded in the main process: the reasons must come from the flags'
    skipped = dataset.skipped
    reasons = list(skipped.values())
    assert len(reasons) == 2 and '/a/8.png: unreadable image' in reasons[0] and '/b/9.jpg: unreadable' in reasons[1]


def write_ply(path, points: np.ndarray, ascii: bool = False) -> None:
    o3d = needs_open3d()
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.astype(np.float64)))
    assert o3d.io.write_point_cloud(str(path), cloud, write_ascii=ascii)


@pytest.mark.parametrize('ascii', [False, True], ids=['binary', 'ascii'])
def test_truncated_ply_names_the_file(tmp_path, ascii) -> None:
    """open3d itself returns the full point count for a cut file (zeros for what is missing); vispe refuses it."""
    o3d = needs_open3d()
    points = np.random.default_rng(0).random((200, 3))
    write_ply(tmp_path / 'whole.ply', points, ascii)
    data = (tmp_path / 'whole.ply').read_bytes()
    (tmp_path / 'cut.ply').write_bytes(data[: len(data) * 2 // 3])
    assert len(o3d.io.read_point_cloud(str(tmp_path / 'cut.ply')).points) == 200  # what vispe guards against
    np.testing.assert_allclose(read_points(str(tmp_path / 'whole.ply')), points, rtol=1e-6, atol=1e-6)
    with pytest.raises(SampleError, match=r'cut\.ply: truncated PLY'):
        read_points(str(tmp_path / 'cut.ply'))


def test_ply_header_checks(tmp_path) -> None:
    (tmp_path / 'x.ply').write_bytes(b'solid cube\nfacet\n')
    with pytest.raises(SampleError, match='not a PLY file'):
        check_ply(str(tmp_path / 'x.ply'))
    (tmp_path / 'y.ply').write_bytes(b'ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\n')
    with pytest.raises(SampleError, match='never ends'):
        check_ply(str(tmp_path / 'y.ply'))


def test_nan_coordinates_name_the_file_and_count(tmp_path) -> None:
    points = np.random.default_rng(0).random((50, 3))
    points[[3, 7]] = np.nan
    write_ply(tmp_path / 'nan.ply', points)
    with pytest.raises(SampleError, match=r'nan\.ply: 2 of 50 points have NaN or Inf coordinates \(first at row 3\)'):
        read_points(str(tmp_path / 'nan.ply'))


def modelnet_text(root, bad_item: str | None = None) -> None:
    """A two-class modelnet40_normal_resampled layout with 3 clouds per class, ``bad_item`` holding a NaN."""
    (root / 'modelnet40_shape_names.txt').write_text('airplane\nbed\n')
    items = []
    rng = np.random.default_rng(0)
    for cls in ('airplane', 'bed'):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            name = f'{cls}_{i:04d}'
            cloud = rng.random((40, 6))
            if name == bad_item:
                cloud[5, 1] = np.nan
            np.savetxt(root / cls / f'{name}.txt', cloud, delimiter=',')
            items.append(name)
    for split in ('train', 'test'):
        (root / f'modelnet40_{split}.txt').write_text('\n'.join(items) + '\n')


def test_modelnet_nan_file_raises_or_is_skipped(tmp_path) -> None:
    modelnet_text(tmp_path, bad_item='bed_0001')
    strict = ModelNet40(str(tmp_path), num_points=16)
    bad = [i for i, (p, _) in enumerate(strict.items) if p.endswith('bed_0001.txt')][0]
    with pytest.raises(SampleError, match=r'bed_0001\.txt: 1 of 40 points have NaN'):
        strict[bad]
    lenient = ModelNet40(str(tmp_path), num_points=16, on_error='skip')
    with pytest.warns(UserWarning, match='bed_0001'):
        item = lenient[bad]
    assert torch.isfinite(item['inputs']).all() and list(lenient.skipped) == [bad]


def test_missing_data_roots_name_the_path(tmp_path) -> None:
    missing = tmp_path / 'nowhere'
    with pytest.raises(FileNotFoundError, match=rf'{missing}/train not found.*ImageFolder tree'):
        ImageFolderDataset(missing)
    with pytest.raises(FileNotFoundError, match=rf'ModelNet40 not found under {missing}'):
        ModelNet40(str(missing))
    with pytest.raises(FileNotFoundError, match=rf'{missing}/cifar-10-batches-py not found'):
        CIFAR10Dataset(missing)


def test_runner_reports_skipped_samples(tmp_path, caplog) -> None:
    """Training on an ImageFolder with one corrupt image and on_error='skip': the run finishes and the log says how
    many samples were skipped."""
    from mmengine.runner import Runner
    from test_tools import tiny_config

    from vispe.engine.config import load_config, without_validation

    root = image_tree(tmp_path / 'data', {'a/9.png': b'junk'})
    cfg = load_config(tiny_config(tmp_path), work_dir=str(tmp_path / 'work'))
    cfg.model.backbone.num_classes = 2
    cfg.train_dataloader.dataset = dict(
        type='ImageFolderDataset', data_root=str(root), image_size=32, normalize=False, on_error='skip'
    )
    without_validation(cfg)  # training is what is tested
    runner = Runner.from_cfg(cfg)
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    runner.logger.addHandler(handler)
    with pytest.warns(UserWarning, match='9.png'):
        runner.train()
    assert any('1 unreadable train sample(s) skipped' in line and '9.png' in line for line in lines), lines[-5:]
