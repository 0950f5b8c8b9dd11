"""Shapes2D 'shape_color', analytic crops, the crop-box transform and the offline generation metrics."""

import hashlib
import os

import numpy as np
import pytest
import torch
from mmengine.config import Config

from vispe.datasets import RandomResizedCropBox, Shapes2D, TransformedDataset
from vispe.datasets.scene2d import Scene, Shape, render_scene
from vispe.datasets.shapes2d import (
    BLUE,
    COLOR_NAMES,
    PALETTE,
    RED,
    SHAPE_COLOR_CLASSES,
    SHAPE_COLOR_SHAPES,
    YELLOW,
    shape_color_of,
)
from vispe.evaluation.generation_metrics import (
    ShapesFeatures,
    find_objects,
    frechet_distance,
    generation_metrics,
    kernel_distance,
    object_metrics,
)
from vispe.tasks.classification import ImageClassifier

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESOLUTIONS = (32, 48, 64)
N_SHAPES = len(SHAPE_COLOR_SHAPES)


def shape_color_batch(num: int, size, seed: int = 0, split: str = 'val'):
    ds = Shapes2D('shape_color', split=split, num_samples=num, image_size=size, seed=seed)
    items = [ds[i] for i in range(num)]
    return torch.stack([it['inputs'] for it in items]), torch.tensor([it['labels'] for it in items])


def to_inputs(image: np.ndarray) -> torch.Tensor:
    """Rendered (H, W, 3) in [0, 1] -> (3, H, W) in [-1, 1], like Shapes2D items."""
    return torch.from_numpy(image.transpose(2, 0, 1).copy()) * 2.0 - 1.0


# --- existing tasks ---------------------------------------------------------------------------------------------

# Computed with shapes2d.py as it was before 'shape_color' and cropping were added: (index, label, hash of the
# scene's parameters, sum and sum of squares of the normalised 48 px image), for Shapes2D(task, 'val', seed=7);
# and (number of classes, hash of the class names).
ORIGINAL = {
    'position': [
        (0, 23, '36623d48c04c65af', -6846.247, 6871.68),
        (3, 16, '53ac11aff4fb5a52', -6754.318, 6812.855),
        (9, 24, '2b818a1bb21b2feb', -6701.756, 6703.219),
    ],
    'relation': [
        (0, 3, '7ff94cc77a65e3cf', -6842.402, 6860.072),
        (3, 2, '3b0d390fa696be4c', -6620.818, 6678.766),
        (9, 3, '9945a111368d0be4', -6742.674, 6811.086),
    ],
    'three_cell': [
        (0, 2, '006fecb5170dc74c', -6528.0, 6912.0),
        (3, 1, '2fbdd16bd334b630', -6528.0, 6912.0),
        (9, 2, 'bd6263f82bcab159', -6528.0, 6912.0),
    ],
    'shape': [
        (0, 4, '3f8812af3bac778a', -6731.487, 6809.215),
        (3, 2, 'e7e561f2ebd5adfe', -6716.896, 6789.21),
        (9, 4, 'db9b43c37c6dac44', -6085.001, 6118.714),
    ],
}


ORIGINAL_CLASSES = {
    'position': (27, '2511510e086d1c9a'),
    'relation': (4, 'd6d98b1208b7dbe2'),
    'three_cell': (3, 'e45c51de2ee643d8'),
    'shape': (5, '2ca9ecc7f4aa663e'),
}


@pytest.mark.parametrize('task', sorted(ORIGINAL))
def test_existing_tasks_unchanged(task):
    ds = Shapes2D(task, split='val', num_samples=10, image_size=48, seed=7)
    num_classes, classes_hash = ORIGINAL_CLASSES[task]
    assert ds.num_classes == num_classes
    assert hashlib.sha256(repr(tuple(ds.classes)).encode()).hexdigest()[:16] == classes_hash
    for index, label, scene_hash, total, total_sq in ORIGINAL[task]:
        scene = ds.scene(index)
        key = repr(
            [
                (s.kind, [round(v, 9) for v in s.center], round(s.size, 9), [round(c, 9) for c in s.color])
                for s in scene.shapes
            ]
        ) + str(scene.label)
        item = ds[index]
        image = item['inputs'].double()
        assert item['labels'] == scene.label == label
        assert hashlib.sha256(key.encode()).hexdigest()[:16] == scene_hash
        assert float(image.sum()) == pytest.approx(total, abs=2e-3)
        assert float((image * image).sum()) == pytest.approx(total_sq, abs=2e-3)
        assert set(item) == {'inputs', 'labels'}  # no crop key unless asked for


# --- the shape_color task ---------------------------------------------------------------------------------------


def test_shape_color_classes_and_metainfo():
    ds = Shapes2D('shape_color', num_samples=200)
    assert ds.num_classes == len(SHAPE_COLOR_CLASSES) == len(COLOR_NAMES) * N_SHAPES == 20
    assert ds.classes[0] == 'red circle' and ds.classes[-1] == 'yellow diamond'
    assert ds.metainfo['shapes'] == SHAPE_COLOR_SHAPES
    assert tuple(ds.metainfo['colors'].values()) == PALETTE
    for label, name in enumerate(ds.classes):
        shape, color = shape_color_of(label)
        assert name == f'{color} {shape}'
    for i in range(50):  # the scene holds exactly what the label says
        scene = ds.scene(i)
        shape, color = shape_color_of(scene.label)
        (obj,) = scene.shapes
        assert obj.kind == shape and obj.color == ds.metainfo['colors'][color]
    assert len({ds[i]['labels'] for i in range(200)}) == 20


@pytest.mark.parametrize('size', RESOLUTIONS)
def test_metrics_on_real_images(size):
    images, labels = shape_color_batch(300 if size == 32 else 200, size)  # 300: more than one chunk of 256
    metrics = object_metrics(images, labels)
    assert metrics['count_accuracy'] >= 0.98
    assert metrics['attribute_accuracy'] >= 0.98
    wrong_color = (labels + N_SHAPES) % len(SHAPE_COLOR_CLASSES)  # same shape, next colour
    assert object_metrics(images, wrong_color)['attribute_accuracy'] == 0.0
    wrong_shape = labels // N_SHAPES * N_SHAPES + (labels % N_SHAPES + 1) % N_SHAPES  # same colour, next shape
    wrong = object_metrics(images, wrong_shape)
    assert wrong['color_accuracy'] >= 0.98 and wrong['attribute_accuracy'] <= 0.02


def test_find_objects_measures_a_known_square():
    scene = Scene(0, (Shape('square', (0.5, 0.5), 0.25, YELLOW), Shape('circle', (0.15, 0.15), 0.1, BLUE)))
    (objects,) = find_objects(to_inputs(render_scene(scene, 32))[None])
    square, circle = objects  # largest first
    assert square.color == COLOR_NAMES.index('yellow') and circle.color == COLOR_NAMES.index('blue')
    assert square.bbox == (8, 8, 24, 24) and square.area == 256 and int(square.mask.sum()) == 256
    assert square.mean_color == pytest.approx(YELLOW, abs=1e-5)
    assert circle.area == pytest.approx(np.pi * 3.2**2, rel=0.15)


@pytest.mark.parametrize('size', RESOLUTIONS)
def test_noise_and_blank_images_have_no_single_object(size):
    gen = torch.Generator().manual_seed(size)
    labels = torch.arange(100) % 20
    batches = {
        'uniform noise': torch.rand(100, 3, size, size, generator=gen) * 2 - 1,
        'gaussian noise': torch.randn(100, 3, size, size, generator=gen).clamp(-1, 1),
        'black': -torch.ones(100, 3, size, size),
        'white': torch.ones(100, 3, size, size),
        'grey': torch.zeros(100, 3, size, size),
    }
    for name, images in batches.items():
        metrics = object_metrics(images, labels)
        assert metrics['count_accuracy'] <= 0.1, name
        assert metrics['attribute_accuracy'] <= 0.02, name


@pytest.mark.parametrize('size', RESOLUTIONS)
def test_two_objects_count_as_two(size):
    pairs = [
        (Shape('circle', (0.25, 0.3), 0.15, RED), Shape('square', (0.72, 0.7), 0.15, BLUE)),
        (Shape('cross', (0.3, 0.7), 0.14, YELLOW), Shape('triangle', (0.7, 0.3), 0.13, YELLOW)),  # same colour
        (Shape('diamond', (0.2, 0.2), 0.12, PALETTE[1]), Shape('circle', (0.75, 0.75), 0.2, PALETTE[1])),
    ]
    images = torch.stack([to_inputs(render_scene(Scene(0, pair), size)) for pair in pairs])
    assert [len(objects) for objects in find_objects(images)] == [2, 2, 2]
    labels = [0, COLOR_NAMES.index('yellow') * N_SHAPES + 3, N_SHAPES]  # the first object's class
    metrics = object_metrics(images, labels)
    assert metrics['count_accuracy'] == 0.0 and metrics['attribute_accuracy'] == 0.0


# --- crops ------------------------------------------------------------------------------------------------------


def test_crop_boxes_valid_and_deterministic():
    kwargs = dict(task='shape_color', num_samples=100, image_size=(32, 48), seed=3, crop_scale=(0.1, 1.0))
    ds = Shapes2D(crop_ratio=(0.5, 2.0), **kwargs)
    boxes = torch.stack([ds[i]['crop'] for i in range(100)])
    top, left, height, width = boxes.unbind(1)
    assert boxes.dtype == torch.float32 and boxes.shape == (100, 4)
    assert (boxes >= 0).all() and (height > 0).all() and (width > 0).all()
    assert (top + height <= 1 + 1e-6).all() and (left + width <= 1 + 1e-6).all()
    assert len({tuple(b.tolist()) for b in boxes}) == 100  # a different window per item
    again = Shapes2D(crop_ratio=(0.5, 2.0), **kwargs)
    for i in (0, 17, 99):
        assert torch.equal(again[i]['crop'], boxes[i]) and torch.equal(again[i]['inputs'], ds[i]['inputs'])
    other = Shapes2D(crop_ratio=(0.5, 2.0), **{**kwargs, 'seed': 4})
    assert not torch.equal(other[0]['crop'], boxes[0])
    square = Shapes2D('shape_color', num_samples=20, image_size=32, crop_scale=(0.2, 0.6))
    for i in range(20):  # the default ratio keeps windows square, of the asked area
        _, _, h, w = square.crop_box(i)
        assert h == pytest.approx(w) and 0.2 - 1e-9 <= h * w <= 0.6 + 1e-9


def test_crop_off_is_the_full_image():
    plain = Shapes2D('shape_color', num_samples=10, image_size=32)
    asked = Shapes2D('shape_color', num_samples=10, image_size=32, return_crop=True)
    for i in range(10):
        assert 'crop' not in plain[i]
        assert asked[i]['crop'].tolist() == [0.0, 0.0, 1.0, 1.0]
        assert torch.equal(asked[i]['inputs'], plain[i]['inputs'])
    cropped = Shapes2D('shape_color', num_samples=10, image_size=32, crop_scale=(0.3, 0.5), return_crop=False)
    assert 'crop' not in cropped[0] and not torch.equal(cropped[0]['inputs'], plain[0]['inputs'])


def test_crop_renders_the_window_of_the_same_scene():
    plain = Shapes2D('shape_color', num_samples=10, image_size=32, seed=5)
    ds = Shapes2D('shape_color', num_samples=10, image_size=32, seed=5, crop_scale=(0.2, 0.8))
    for i in range(10):
        assert ds.scene(i) == plain.scene(i) and ds[i]['labels'] == plain[i]['labels']
        item = ds[i]
        window = tuple(item['crop'].double().tolist())
        expected = to_inputs(render_scene(ds.scene(i), 32, window))
        assert torch.allclose(item['inputs'], expected, atol=1e-5)
    # A window rendered at 32 px is the whole scene rendered at the window's pixel density, sliced.
    scene = Scene(0, (Shape('circle', (0.45, 0.55), 0.2, RED), Shape('cross', (0.7, 0.3), 0.15, BLUE)))
    for (top, left, h, w), full, rows, cols in [
        ((0.25, 0.25, 0.5, 0.5), (64, 64), slice(16, 48), slice(16, 48)),
        ((0.5, 0.375, 0.25, 0.25), (128, 128), slice(64, 96), slice(48, 80)),
        ((0.0, 0.5, 0.5, 0.5), (64, 64), slice(0, 32), slice(32, 64)),
    ]:
        crop = render_scene(scene, 32, (top, left, h, w))
        sliced = render_scene(scene, full)[rows, cols]
        assert crop.max() > 0.5  # the window is not empty
        np.testing.assert_allclose(crop, sliced, atol=1e-5)


def test_random_resized_crop_box_convention():
    height, width = 40, 60
    rows = torch.arange(height, dtype=torch.float32).add(0.5).div(height)[:, None].expand(height, width)
    cols = torch.arange(width, dtype=torch.float32).add(0.5).div(width)[None, :].expand(height, width)
    image = torch.stack([rows, cols, torch.zeros(height, width)])  # each pixel holds its own centre
    transform = RandomResizedCropBox(size=16, scale=(0.2, 0.9))
    torch.manual_seed(1)
    for _ in range(20):
        item = transform({'inputs': image, 'labels': 3})
        out, (top, left, h, w) = item['inputs'], item['crop'].tolist()
        assert out.shape == (3, 16, 16) and item['labels'] == 3
        assert 0 <= top and 0 <= left and top + h <= 1 + 1e-6 and left + w <= 1 + 1e-6
        # The crop's pixel centres (bilinear keeps a linear ramp) lie where the box says.
        assert float(out[0].mean()) == pytest.approx(top + h / 2, abs=0.01)
        assert float(out[1].mean()) == pytest.approx(left + w / 2, abs=0.01)
        assert float(out[0].max() - out[0].min()) == pytest.approx(h * 15 / 16, abs=0.02)
    tensor_out, crop = transform(image)
    assert tensor_out.shape == (3, 16, 16) and crop.shape == (4,)
    wrapped = TransformedDataset(
        dict(type='Shapes2D', task='shape_color', num_samples=4, image_size=48),
        [dict(type='RandomResizedCropBox', size=32, scale=(0.5, 1.0))],
    )
    assert wrapped[0]['inputs'].shape == (3, 32, 32) and wrapped[0]['crop'].shape == (4,)
    assert wrapped.metainfo['task'] == 'shape_color'


# --- Frechet distance and KID -----------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def features():
    torch.manual_seed(0)
    backbone = dict(
        model_name='vit_tiny_patch16_224',
        encoding='ape_sincos',
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        mlp_ratio=2.0,
        num_classes=20,
    )
    return ShapesFeatures(ImageClassifier(backbone))  # randomly initialised


def test_shapes_features_any_resolution(features):
    assert features.num_features == 64 and not features.training
    for size in RESOLUTIONS:
        images, _ = shape_color_batch(4, size)
        out = features(images)
        assert out.shape == (4, 64) and out.dtype == torch.float32 and torch.isfinite(out).all()
    features.train()
    assert not features.training and not features.backbone.training


def test_fd_and_kid_separate_real_from_noise(features):
    real_a, labels = shape_color_batch(96, 32, seed=0)
    real_b, _ = shape_color_batch(96, 32, seed=1)
    noise = torch.rand_like(real_a) * 2 - 1
    fd_same = frechet_distance(real_a, real_a, features)
    fd_real = frechet_distance(real_b, real_a, features)
    fd_noise = frechet_distance(noise, real_a, features)
    assert abs(fd_same) < 1e-3 * fd_noise
    assert fd_real < 0.2 * fd_noise
    state = torch.random.get_rng_state()
    kid_real, _ = kernel_distance(real_b, real_a, features, subset_size=50, subsets=20)
    assert torch.equal(state, torch.random.get_rng_state())  # subsets drawn from their own seed
    assert kernel_distance(real_b, real_a, features, subset_size=50, subsets=20)[0] == kid_real
    kid_noise, _ = kernel_distance(noise, real_a, features, subset_size=50, subsets=20)
    assert kid_real < 0.1 * kid_noise

    results = generation_metrics(real_b, labels, real_a, features, kid_subset_size=50)
    assert set(results) >= {'count_accuracy', 'attribute_accuracy', 'fd', 'kid_mean', 'kid_std'}
    assert results['fd'] == pytest.approx(fd_real, rel=1e-4)
    assert set(generation_metrics(real_b, labels)).isdisjoint({'fd', 'kid_mean', 'kid_std'})
    with pytest.raises(ValueError, match='differ in size'):
        generation_metrics(shape_color_batch(4, 48)[0], labels[:4], real_a, features)


def test_classifier_config_matches_the_task():
    cfg = Config.fromfile(os.path.join(ROOT, 'configs/dit/classifier_shapes2d_shape_color.py'))
    dataset = cfg.train_dataloader.dataset
    assert dataset.task == 'shape_color' and cfg.val_dataloader.dataset.task == 'shape_color'
    assert cfg.model.backbone.num_classes == len(SHAPE_COLOR_CLASSES)
    assert cfg.model.backbone.encoding == 'ape_sincos'
    assert all(size % cfg.model.backbone.patch_size == 0 for size in RESOLUTIONS)


@pytest.mark.parametrize('size', RESOLUTIONS)
def test_shape_ignores_shade_and_rejects_non_shapes(size):
    images, labels = shape_color_batch(100, size, seed=2)
    darker = (images + 1) * 0.7 - 1  # every colour at 70% brightness
    assert object_metrics(darker, labels)['attribute_accuracy'] >= 0.98
    ring = (Shape('circle', (0.5, 0.5), 0.3, RED), Shape('circle', (0.5, 0.5), 0.18, (0.0, 0.0, 0.0)))
    bar = (Shape('square', (0.4, 0.5), 0.15, RED), Shape('square', (0.6, 0.5), 0.15, RED))  # one 5:3 rectangle
    blobs = torch.stack([to_inputs(render_scene(Scene(0, shapes), size)) for shapes in (ring, bar)])
    assert [len(objects) for objects in find_objects(blobs)] == [1, 1]
    for kind in range(N_SHAPES):  # whatever shape was asked for, neither blob is one
        metrics = object_metrics(blobs, [kind, kind])
        assert metrics['count_accuracy'] == 1.0 and metrics['color_accuracy'] == 1.0
        assert metrics['shape_accuracy'] == 0.0
