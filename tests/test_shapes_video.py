"""Tests for vispe.datasets.shapes_video: determinism, the same clip at any frame count, turned shapes, and that each
task's label is what its clips show."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vispe.datasets.scene2d import Scene, Shape, render_scene
from vispe.datasets.shapes_video import TASKS, ShapesVideo, render_clip
from vispe.registry import DATASETS

ALL_TASKS = sorted(TASKS)


@pytest.mark.parametrize('task', ALL_TASKS)
def test_same_seed_split_index_gives_identical_clips_and_others_differ(task: str) -> None:
    a, b = ShapesVideo(task, num_samples=4, seed=3), ShapesVideo(task, num_samples=4, seed=3)
    assert torch.equal(a[1]['inputs'], b[1]['inputs']) and a[1]['labels'] == b[1]['labels']
    other_seed, val = ShapesVideo(task, num_samples=4, seed=4), ShapesVideo(task, 'val', num_samples=4, seed=3)
    assert not torch.equal(a[1]['inputs'], other_seed[1]['inputs'])
    assert not torch.equal(a[1]['inputs'], val[1]['inputs'])


def test_item_format_and_normalisation() -> None:
    ds = ShapesVideo('count', num_samples=3, num_frames=6, image_size=(24, 40))
    raw = ShapesVideo('count', num_samples=3, num_frames=6, image_size=(24, 40), normalize=False)
    item = ds[2]
    assert item['inputs'].shape == (3, 6, 24, 40) and item['inputs'].dtype == torch.float32
    assert isinstance(item['labels'], int) and 0 <= item['labels'] < ds.num_classes
    assert torch.allclose(item['inputs'], (raw[2]['inputs'] - 0.5) / 0.5)
    assert raw[2]['inputs'].min() >= 0.0 and raw[2]['inputs'].max() <= 1.0
    assert ds.metainfo == {'task': 'count', 'classes': ('one', 'two', 'three'), 'num_classes': 3}


def test_a_cached_dataset_renders_each_item_once_and_gives_the_same_items(monkeypatch) -> None:
    plain, cached = ShapesVideo('direction', num_samples=3), ShapesVideo('direction', num_samples=3, cache=True)
    renders = []
    original = ShapesVideo._render
    monkeypatch.setattr(ShapesVideo, '_render', lambda self, *a: renders.append(1) or original(self, *a))
    first = [cached[i] for i in range(3)]
    again = [cached[i] for i in (2, 0, 1)]
    assert len(renders) == 3  # the second pass comes from memory
    for i, (a, b) in enumerate(zip(first, again[1:] + again[:1])):
        assert a['labels'] == b['labels'] == plain[i]['labels']
        assert torch.equal(a['inputs'], b['inputs']) and torch.equal(a['inputs'], plain[i]['inputs'])
    first[0]['labels'] = -1  # a caller changing its item's dict changes nothing in the cache
    assert cached[0]['labels'] == plain[0]['labels']


@pytest.mark.parametrize('task', ALL_TASKS)
def test_the_same_clip_at_twice_the_frames_averages_back(task: str) -> None:
    """Frame i of T is the mean over its exposure, so pairs of frames of 2T average to the frames of T (the default
    exposures take the same instants: 4 per frame at 8, 2 at 16)."""
    ds = ShapesVideo(task, num_samples=3, normalize=False)
    for index in range(3):
        eight, sixteen = ds.render(index, num_frames=8), ds.render(index, num_frames=16)
        pairs = sixteen.reshape(3, 8, 2, 32, 32).mean(dim=2)
        assert torch.allclose(pairs, eight, atol=1e-6)


@pytest.mark.parametrize('task', ALL_TASKS)
def test_every_class_appears_and_shapes_stay_inside(task: str) -> None:
    ds = ShapesVideo(task, num_samples=300)
    clips = [ds.clip(i) for i in range(300)]
    counts = np.bincount([c.label for c in clips], minlength=ds.num_classes)
    assert counts.min() > 300 / ds.num_classes / 2, counts
    for clip in clips[:60]:
        for t in np.linspace(0.0, 0.999, 25):
            for shape in clip.scene(float(t)).shapes:
                x0, y0, x1, y1 = shape.bbox()
                assert 0.0 <= x0 and 0.0 <= y0 and x1 <= 1.0 and y1 <= 1.0


def test_a_turned_shape_renders_turned() -> None:
    """A square a quarter turn round is the same square; a triangle half a turn round is its upside-down image."""
    square = Shape('square', (0.5, 0.5), 0.3, (1.0, 1.0, 1.0))
    turned = Shape('square', (0.5, 0.5), 0.3, (1.0, 1.0, 1.0), angle=math.pi / 2)
    np.testing.assert_allclose(render_scene_of(turned), render_scene_of(square), atol=1e-5)
    triangle = Shape('triangle', (0.5, 0.5), 0.3, (1.0, 1.0, 1.0))
    upside_down = Shape('triangle', (0.5, 0.5), 0.3, (1.0, 1.0, 1.0), angle=math.pi)
    np.testing.assert_allclose(render_scene_of(upside_down), render_scene_of(triangle)[::-1], atol=1e-5)
    eighth = Shape('square', (0.5, 0.5), 0.3, (1.0, 1.0, 1.0), angle=math.pi / 4)
    assert not np.allclose(render_scene_of(eighth), render_scene_of(square), atol=0.1)
    assert eighth.bbox()[2] == pytest.approx(0.5 + 0.3 * math.sqrt(2.0))  # the box of every angle


def render_scene_of(shape: Shape) -> np.ndarray:
    return render_scene(Scene(0, (shape,)), 40)


def _colour_mass(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) -> (T, H, W): how far each pixel is from grey (the spinners) and black."""
    return frames.max(axis=-1) - frames.min(axis=-1)


def test_direction_labels_follow_the_coloured_shape() -> None:
    ds = ShapesVideo('direction', num_samples=40, num_frames=8, normalize=False)
    for index in range(40):
        mass = _colour_mass(render_clip(ds.clip(index), 8, 32))
        ys, xs = np.mgrid[:32, :32]
        centroid = [((m * xs).sum() / m.sum(), (m * ys).sum() / m.sum()) for m in mass[[0, -1]]]
        dx, dy = centroid[1][0] - centroid[0][0], centroid[1][1] - centroid[0][1]
        moved = ('right' if dx > 0 else 'left') if abs(dx) > abs(dy) else ('down' if dy > 0 else 'up')
        assert moved == ds.classes[ds.clip(index).label]


def test_first_mover_label_names_the_track_that_starts_first() -> None:
    ds = ShapesVideo('first_mover', num_samples=50)
    for index in range(50):
        red, blue = ds.clip(index).tracks
        first = 'red' if red.move[0] < blue.move[0] else 'blue'
        assert first == ds.classes[ds.clip(index).label]
        assert abs(red.move[0] - blue.move[0]) >= 0.2 - 1e-9


def test_count_and_half_labels_are_what_the_frames_show() -> None:
    """The number of separate bursts of colour along 16 frames is the count's label; the half in which colour shows
    is the half's label."""
    count = ShapesVideo('count', num_samples=40, normalize=False)
    for index in range(40):
        lit = _colour_mass(render_clip(count.clip(index), 16, 32)).sum(axis=(1, 2)) > 1.0
        bursts = int(lit[0]) + int(np.sum(lit[1:] & ~lit[:-1]))
        assert bursts == count.clip(index).label + 1
    half = ShapesVideo('half', num_samples=40, normalize=False)
    for index in range(40):
        lit = _colour_mass(render_clip(half.clip(index), 8, 32)).sum(axis=(1, 2)) > 0.0
        shown = np.flatnonzero(lit)
        assert shown.size and set(shown // 4) == {half.clip(index).label}


def test_bad_arguments_say_what_is_valid() -> None:
    with pytest.raises(ValueError, match='unknown ShapesVideo task .* valid tasks'):
        ShapesVideo('colour')
    with pytest.raises(ValueError, match='num_frames and exposure must be positive'):
        ShapesVideo(num_frames=0)
    with pytest.raises(IndexError, match='out of range'):
        ShapesVideo(num_samples=2).clip(2)


def test_registry_builds_it() -> None:
    ds = DATASETS.build(dict(type='ShapesVideo', task='half', num_samples=2, num_frames=4, image_size=16))
    assert isinstance(ds, ShapesVideo) and ds[0]['inputs'].shape == (3, 4, 16, 16)
