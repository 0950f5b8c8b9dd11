"""Tests for vispe.datasets: Shapes2D (determinism, resolution consistency, label correctness) and the
file-backed data sets (ImageFolderDataset, CIFAR10Dataset)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from vispe.datasets.folder import CIFAR10Dataset, ImageFolderDataset
from vispe.datasets.shapes2d import PAIRS, Shapes2D
from vispe.registry import DATASETS
from vispe.tasks import MultiScaleDataPreprocessor

TASKS = ['position', 'relation', 'three_cell', 'shape']
NUM_CLASSES = {'position': 27, 'relation': 4, 'three_cell': 3, 'shape': 5}


def centroid(weights: np.ndarray) -> np.ndarray:
    """Weighted centroid (x, y) of an (H, W) weight map, in scene units [0, 1]."""
    h, w = weights.shape
    ys, xs = np.mgrid[0:h, 0:w]
    total = weights.sum()
    assert total > 0, 'expected some pixels of this colour'
    return np.array([((xs + 0.5) * weights).sum() / total / w, ((ys + 0.5) * weights).sum() / total / h])


def dominant(image: np.ndarray, channel: int) -> np.ndarray:
    """Weights of pixels whose ``channel`` is at least twice each other channel (coloured pixels on black)."""
    others = np.delete(image, channel, axis=2).max(axis=2)
    value = image[..., channel]
    return np.where(value > 2 * others, value, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# Shapes2D: determinism, splits, sizes
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('task', TASKS)
def test_same_seed_split_index_gives_identical_items(task: str) -> None:
    a, b = Shapes2D(task=task, num_samples=10, seed=3), Shapes2D(task=task, num_samples=10, seed=3)
    for i in range(10):
        ia, ib = a[i], b[i]
        assert torch.equal(ia['inputs'], ib['inputs'])
        assert ia['labels'] == ib['labels']
        assert isinstance(ia['labels'], int)


@pytest.mark.parametrize('task', TASKS)
def test_seed_and_split_change_the_images(task: str) -> None:
    base = Shapes2D(task=task, num_samples=10, seed=0)
    other_seed = Shapes2D(task=task, num_samples=10, seed=1)
    val = Shapes2D(task=task, split='val', num_samples=10, seed=0)
    for other in (other_seed, val):
        differing = sum(not torch.equal(base[i]['inputs'], other[i]['inputs']) for i in range(10))
        assert differing == 10


def test_item_format_and_normalisation() -> None:
    ds = Shapes2D(task='shape', num_samples=5, image_size=24)
    raw = Shapes2D(task='shape', num_samples=5, image_size=24, normalize=False)
    item, raw_item = ds[0], raw[0]
    assert item['inputs'].shape == (3, 24, 24) and item['inputs'].dtype == torch.float32
    assert raw_item['inputs'].min() == 0.0 and 0.5 < raw_item['inputs'].max() <= 1.0  # black background, bright object
    torch.testing.assert_close(item['inputs'], (raw_item['inputs'] - 0.5) / 0.5)
    torch.testing.assert_close(raw_item['inputs'], raw.render(0))
    assert ds[-1]['labels'] == ds[4]['labels']
    with pytest.raises(IndexError):
        ds[5]
    assert len(list(ds)) == 5  # iteration stops at the end thanks to IndexError


@pytest.mark.parametrize('task', TASKS)
def test_metainfo_and_label_range(task: str) -> None:
    ds = Shapes2D(task=task, num_samples=50)
    assert ds.num_classes == NUM_CLASSES[task] == len(ds.classes) == len(set(ds.classes))
    assert ds.metainfo['num_classes'] == ds.num_classes and list(ds.metainfo['classes']) == ds.classes
    assert all(0 <= ds.scene(i).label < ds.num_classes for i in range(50))


def test_non_square_sizes() -> None:
    ds = Shapes2D(task='relation', num_samples=4, image_size=(32, 48))
    assert ds[0]['inputs'].shape == (3, 32, 48)
    assert ds.render(1, (20, 40)).shape == (3, 20, 40)
    assert ds.render_uint8(1, (20, 40)).shape == (20, 40, 3) and ds.render_uint8(1).dtype == np.uint8
    # The stretched scene is still resolution-consistent.
    for i in range(4):
        small, big = ds.render(i, (32, 48)), F.avg_pool2d(ds.render(i, (64, 96))[None], 2)[0]
        assert (small - big).abs().sum() / small.sum() < 0.1


@pytest.mark.parametrize('task', TASKS)
def test_resolution_consistency(task: str) -> None:
    """A 64 px (or 96 px) render area-downsampled to 32 px matches the 32 px render."""
    ds = Shapes2D(task=task, num_samples=20)
    for i in range(20):
        small = ds.render(i, 32)
        for big_size in (64, 96):
            down = F.interpolate(ds.render(i, big_size)[None], size=(32, 32), mode='area')[0]
            assert (small - down).abs().mean() < 0.05
            # Images are mostly background, so also bound the error relative to the object's total intensity.
            assert (small - down).abs().sum() / small.sum() < 0.1
        other = ds.render((i + 1) % 20, 32)
        assert (small - other).abs().sum() / small.sum() > 0.3  # the bound above is not trivially met


@pytest.mark.parametrize('task', TASKS)
def test_shapes_stay_inside_the_image(task: str) -> None:
    ds = Shapes2D(task=task, num_samples=300)
    for i in range(300):
        for shape in ds.scene(i).shapes:
            x0, y0, x1, y1 = shape.bbox()
            assert 0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0


@pytest.mark.parametrize('task', TASKS)
def test_every_class_appears_roughly_balanced(task: str) -> None:
    ds = Shapes2D(task=task, num_samples=600)
    counts = np.bincount([ds.scene(i).label for i in range(600)], minlength=ds.num_classes)
    assert len(counts) == ds.num_classes
    assert counts.min() > 0
    assert counts.max() < 2.5 * 600 / ds.num_classes


def test_unknown_task_lists_valid_tasks() -> None:
    with pytest.raises(ValueError, match='unknown Shapes2D task') as info:
        Shapes2D(task='colour')
    for name in TASKS:
        assert name in str(info.value)
    with pytest.raises(ValueError, match='split'):
        Shapes2D(split='training')


def test_registry_builds_datasets() -> None:
    ds = DATASETS.build({'type': 'Shapes2D', 'task': 'three_cell', 'num_samples': 3, 'image_size': 16})
    assert isinstance(ds, Shapes2D) and len(ds) == 3 and ds[0]['inputs'].shape == (3, 16, 16)
    assert DATASETS.get('ImageFolderDataset') is ImageFolderDataset
    assert DATASETS.get('CIFAR10Dataset') is CIFAR10Dataset


def test_rendering_is_fast() -> None:
    ds = Shapes2D(task='relation', num_samples=500)
    start = time.perf_counter()
    for i in range(500):
        ds[i]
    assert time.perf_counter() - start < 5.0  # ~0.1 s in practice: 2000 images must stay well under 10 s


# ---------------------------------------------------------------------------------------------------------------
# Shapes2D: labels agree with the pixels
# ---------------------------------------------------------------------------------------------------------------


def test_position_label_matches_centroid_cell() -> None:
    ds = Shapes2D(task='position', num_samples=200)
    for i in range(200):
        image = ds.render_numpy(i)
        cx, cy = centroid(image.sum(axis=2))
        cell = int(cy * 3) * 3 + int(cx * 3)
        assert cell == ds.scene(i).label // 3, f'item {i}'


def test_position_label_matches_shape_fill_ratio() -> None:
    """Area over bounding box: ~0.79 for a circle, ~1 for a square, ~0.5 for a triangle."""
    ds = Shapes2D(task='position', num_samples=100)
    for i in range(100):
        image = ds.render_numpy(i, 128)
        alpha = image.max(axis=2) / image.max()
        ys, xs = np.nonzero(alpha > 0.5)
        ratio = alpha.sum() / ((np.ptp(ys) + 1) * (np.ptp(xs) + 1))
        predicted = 2 if ratio < 0.67 else (0 if ratio < 0.885 else 1)  # triangle, circle, square
        assert predicted == ds.scene(i).label % 3, f'item {i}: fill ratio {ratio:.3f}'


def test_relation_label_matches_red_to_blue_direction() -> None:
    ds = Shapes2D(task='relation', num_samples=200)
    with_distractor = 0
    for i in range(200):
        image = ds.render_numpy(i)
        dx, dy = centroid(dominant(image, 2)) - centroid(dominant(image, 0))
        direction = (0 if dx > 0 else 2) if abs(dx) > abs(dy) else (1 if dy > 0 else 3)  # right, down, left, up
        assert direction == ds.scene(i).label, f'item {i}'
        assert abs(abs(dx) - abs(dy)) > 0.1  # the dominant axis is clear, not a coin flip
        with_distractor += len(ds.scene(i).shapes) == 3
    assert 50 < with_distractor < 150


def test_three_cell_label_matches_farthest_pair() -> None:
    ds = Shapes2D(task='three_cell', num_samples=200)
    for i in range(200):
        image = ds.render_numpy(i)
        centres = [centroid(image[..., c]) * 6 for c in range(3)]  # in cell units
        dists = sorted((np.linalg.norm(centres[a] - centres[b]), k) for k, (a, b) in enumerate(PAIRS))
        assert dists[-1][1] == ds.scene(i).label, f'item {i}'
        assert dists[-1][0] - dists[-2][0] >= 0.5 - 1e-3


def test_shape_task_draws_the_labelled_shape() -> None:
    ds = Shapes2D(task='shape', num_samples=100)
    for i in range(100):
        scene = ds.scene(i)
        assert len(scene.shapes) == 1 and scene.shapes[0].kind == ds.classes[scene.label]
    sizes = {round(ds.scene(i).shapes[0].size, 2) for i in range(100)}
    centres = {tuple(np.round(ds.scene(i).shapes[0].center, 1)) for i in range(100)}
    assert len(sizes) > 5 and len(centres) > 10  # sizes and positions vary: position carries no signal


# ---------------------------------------------------------------------------------------------------------------
# File-backed data sets
# ---------------------------------------------------------------------------------------------------------------

COLOURS = {'cat': (255, 0, 0), 'dog': (0, 0, 255)}


def write_image_folder(root: Path) -> None:
    """Two classes, two 20x24 PNGs each, one solid colour per class."""
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for k in range(2):
            Image.new('RGB', (24, 20), colour).save(root / name / f'{k}.png')


@pytest.mark.parametrize('split', ['train', 'val'])
def test_image_folder_labels_and_shapes(tmp_path: Path, split: str) -> None:
    write_image_folder(tmp_path / split)
    ds = ImageFolderDataset(tmp_path, split=split, image_size=16, normalize=False)
    assert len(ds) == 4 and ds.classes == ['cat', 'dog'] and ds.num_classes == 2
    assert ds.metainfo['classes'] == ('cat', 'dog')
    for i in range(4):
        item = ds[i]
        assert item['inputs'].shape == (3, 16, 16) and item['inputs'].dtype == torch.float32
        label = item['labels']
        expected = torch.tensor(COLOURS[ds.classes[label]], dtype=torch.float32) / 255
        torch.testing.assert_close(item['inputs'].mean(dim=(1, 2)), expected, atol=1e-3, rtol=0)
    assert sorted(ds[i]['labels'] for i in range(4)) == [0, 0, 1, 1]


def test_image_folder_normalises_and_falls_back_to_root(tmp_path: Path) -> None:
    write_image_folder(tmp_path)  # class folders directly under the root, no split folder
    ds = ImageFolderDataset(tmp_path, split='val', image_size=(8, 12))
    item = ds[0]
    assert item['inputs'].shape == (3, 8, 12) and ds.classes == ['cat', 'dog'] and item['labels'] == 0
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    expected = (torch.tensor([1.0, 0.0, 0.0]) - mean) / std
    torch.testing.assert_close(item['inputs'][:, 4, 6], expected, atol=1e-3, rtol=0)


def test_image_folder_symmetric_range_for_diffusion(tmp_path: Path) -> None:
    write_image_folder(tmp_path)
    ds = ImageFolderDataset(tmp_path, split='val', image_size=8, normalize='symmetric')
    torch.testing.assert_close(ds[0]['inputs'][:, 4, 4], torch.tensor([1.0, -1.0, -1.0]), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="'symmetric'"):
        ImageFolderDataset(tmp_path, split='val', image_size=8, normalize='imagenet')


def test_image_folder_missing_paths(tmp_path: Path) -> None:
    missing = tmp_path / 'nowhere'
    with pytest.raises(FileNotFoundError, match='never downloads') as info:
        ImageFolderDataset(missing, split='val')
    assert str(missing / 'val') in str(info.value)
    # A tree of splits without the requested one must not be mistaken for class folders.
    write_image_folder(tmp_path / 'tree' / 'train')
    with pytest.raises(FileNotFoundError) as info:
        ImageFolderDataset(tmp_path / 'tree', split='test')
    assert str(tmp_path / 'tree' / 'test') in str(info.value)


def test_cifar10_missing_root(tmp_path: Path) -> None:
    root = tmp_path / 'cifar10'
    with pytest.raises(FileNotFoundError, match='never downloads') as info:
        CIFAR10Dataset(root, split='train')
    message = str(info.value)
    assert str(root / 'cifar-10-batches-py') in message and 'cifar-10-python.tar.gz' in message
    assert not root.exists()  # nothing was downloaded or created
    with pytest.raises(ValueError, match='split'):
        CIFAR10Dataset(root, split='training')


def test_cifar10_incomplete_folder(tmp_path: Path) -> None:
    (tmp_path / 'cifar-10-batches-py').mkdir()
    with pytest.raises(FileNotFoundError, match='cifar-10-batches-py'):
        CIFAR10Dataset(tmp_path, split='val')


@pytest.mark.skipif(
    not (Path(__file__).parents[1] / 'data/cifar10/cifar-10-batches-py').is_dir(),
    reason='CIFAR-10 not placed under data/cifar10 (see data/README.md)',
)
def test_cifar10_real_data() -> None:
    ds = CIFAR10Dataset(Path(__file__).parents[1] / 'data/cifar10', split='test')
    item = ds[0]
    assert len(ds) == 10000 and ds.num_classes == 10
    assert item['inputs'].shape == (3, 32, 32) and 0 <= item['labels'] < 10


def test_multiscale_preprocessor_resizes_training_batches_only() -> None:
    pre = MultiScaleDataPreprocessor(sizes=(32, 48, 64))
    data = Shapes2D(task='shape_color', image_size=64, split='val', num_samples=4, seed=0)
    batch = {'inputs': torch.stack([data[i]['inputs'] for i in range(4)]), 'labels': torch.arange(4)}
    torch.manual_seed(0)
    seen = {}
    for _ in range(30):
        out = pre(batch, training=True)
        seen[out['inputs'].shape[-1]] = out['inputs']
        assert out['inputs'].shape[:2] == (4, 3) and out['inputs'].shape[-2] == out['inputs'].shape[-1]
        assert torch.equal(out['labels'], batch['labels'])
    assert set(seen) == {32, 48, 64}
    assert torch.equal(seen[64], batch['inputs'])  # the native size is passed through untouched
    # antialiased resizing keeps the picture: the 32 px batch is the 64 px one averaged over 2x2 blocks
    pooled = F.avg_pool2d(batch['inputs'], 2)
    assert (seen[32] - pooled).abs().mean() < 0.02
    assert pre(batch, training=False)['inputs'].shape[-1] == 64  # validation keeps the data set's size


def test_multiscale_preprocessor_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match='positive pixel sizes'):
        MultiScaleDataPreprocessor(sizes=())
