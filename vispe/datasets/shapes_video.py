"""ShapesVideo: procedural clips of moving and turning shapes, for probing positional encodings along time. A clip is a
``scene2d`` scene over time t in [0, 1), drawn from ``(seed, split, index)``; each frame averages its time interval, so
a clip looks the same at any frame count. Tasks (``TASKS``) need temporal order or time: ``direction`` (4: where one
shape moves), ``first_mover`` (2: red or blue starts first), ``count`` (3: flashes), ``half`` (2: when one flash is).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from vispe.datasets.scene2d import ALL_SHAPES, Color, ImageSize, Scene, Shape, as_hw, reach, render_scene
from vispe.datasets.shapes2d import (
    BLUE,
    GREY,
    MARGIN,
    MAX_TRIES,
    RED,
    SPLITS,
    check_index,
    check_procedural_args,
    random_color,
)
from vispe.registry import DATASETS

DIRECTIONS = ('right', 'down', 'left', 'up')
MOVERS = ('red', 'blue')
COUNTS = ('one', 'two', 'three')
HALVES = ('first', 'second')
#: instants per clip the exposure of its frames adds up to, at least (``ShapesVideo.exposure``)
EXPOSURE_PER_CLIP = 32
#: the tracks' sizes (half-extents): at 32 px a shape is 5-8 px across, a turned one fits in its reach
SIZES = (0.08, 0.12)


@dataclass(frozen=True)
class Track:
    """A shape over clip time t in [0, 1): at ``start`` until ``move[0]``, then moving uniformly to ``start + shift`` at
    ``move[1]``; turned by ``angle + spin * t``; shown while t is in one of ``visible`` (half-open windows)."""

    kind: str
    color: Color
    size: float
    start: tuple[float, float]
    shift: tuple[float, float] = (0.0, 0.0)
    move: tuple[float, float] = (0.0, 1.0)
    angle: float = 0.0
    spin: float = 0.0
    visible: tuple[tuple[float, float], ...] = ((0.0, 1.0),)

    def at(self, t: float) -> Shape | None:
        """The shape at time ``t``, or None while hidden."""
        if not any(on <= t < off for on, off in self.visible):
            return None
        t0, t1 = self.move
        frac = min(max((t - t0) / (t1 - t0), 0.0), 1.0)
        center = (self.start[0] + frac * self.shift[0], self.start[1] + frac * self.shift[1])
        return Shape(self.kind, center, self.size, self.color, self.angle + self.spin * t)


@dataclass(frozen=True)
class Clip:
    """A labelled clip; tracks are painted in order, later ones over earlier ones."""

    label: int
    tracks: tuple[Track, ...]

    def scene(self, t: float) -> Scene:
        return Scene(self.label, tuple(s for s in (track.at(t) for track in self.tracks) if s is not None))


def _turning(rng: np.random.Generator) -> tuple[float, float]:
    """A random angle and spin (0.5-2 quarter turns per clip, either way)."""
    return float(rng.uniform(0.0, 2 * math.pi)), float(rng.choice((-1.0, 1.0)) * rng.uniform(0.25, 1.0) * math.pi)


def _inside(point: tuple[float, float], reach: float) -> bool:
    lo, hi = reach + MARGIN, 1.0 - reach - MARGIN
    return lo <= point[0] <= hi and lo <= point[1] <= hi


def _spot(rng: np.random.Generator, reach: float) -> tuple[float, float]:
    lo, hi = reach + MARGIN, 1.0 - reach - MARGIN
    return float(rng.uniform(lo, hi)), float(rng.uniform(lo, hi))


def _apart(a: tuple[float, float], b: tuple[float, float], gap: float) -> bool:
    return max(abs(a[0] - b[0]), abs(a[1] - b[1])) >= gap


def _shape(rng: np.random.Generator) -> tuple[str, float, float]:
    kind = str(rng.choice(ALL_SHAPES))
    size = float(rng.uniform(*SIZES))
    return kind, size, reach(kind, size)


def _spinner(rng: np.random.Generator, avoid: tuple[tuple[float, float], ...], gap: float) -> Track | None:
    """A grey shape turning in place, at least ``gap`` (box distance) from each of ``avoid``; None if none fits."""
    kind, size, reach = _shape(rng)
    for _ in range(MAX_TRIES):
        spot = _spot(rng, reach)
        if all(_apart(spot, a, gap + reach) for a in avoid):
            angle, spin = _turning(rng)
            return Track(kind, GREY, size, spot, angle=angle, spin=spin)
    return None


def _mover(
    rng: np.random.Generator, color: Color, direction: int, length: tuple[float, float], move: tuple[float, float]
) -> Track:
    """A shape that moves in ``direction`` (an index of DIRECTIONS) during ``move``, and stays inside the image."""
    axis, sign = direction % 2, (1.0 if direction < 2 else -1.0)
    kind, size, reach = _shape(rng)
    for _ in range(MAX_TRIES):
        major = float(rng.uniform(*length))
        shift = [0.0, 0.0]
        shift[axis], shift[1 - axis] = sign * major, float(rng.uniform(-0.3, 0.3)) * major
        start = _spot(rng, reach)
        end = (start[0] + shift[0], start[1] + shift[1])
        if _inside(end, reach):
            angle, spin = _turning(rng)
            return Track(kind, color, size, start, (shift[0], shift[1]), move, angle, spin)
    raise RuntimeError(f'no path of length {length} fits the scene; this is a bug in ShapesVideo')


def _direction_clip(rng: np.random.Generator) -> Clip:
    label = int(rng.integers(len(DIRECTIONS)))
    mover = _mover(rng, random_color(rng), label, (0.3, 0.5), (0.0, 1.0))
    spinner = _spinner(rng, _ends(mover), reach(mover.kind, mover.size))  # clear of where the mover starts and ends
    return Clip(label, (mover,) if spinner is None else (spinner, mover))


def _first_mover_clip(rng: np.random.Generator) -> Clip:
    label = int(rng.integers(len(MOVERS)))
    first = float(rng.uniform(0.05, 0.45))
    second = float(rng.uniform(first + 0.2, 0.65))
    starts = (first, second) if label == 0 else (second, first)
    red = _mover(rng, RED, int(rng.integers(len(DIRECTIONS))), (0.2, 0.35), (starts[0], starts[0] + 0.3))
    for _ in range(MAX_TRIES):  # blue starts and ends clear of where red starts and ends (the paths may cross)
        blue = _mover(rng, BLUE, int(rng.integers(len(DIRECTIONS))), (0.2, 0.35), (starts[1], starts[1] + 0.3))
        gap = reach(red.kind, red.size) + reach(blue.kind, blue.size)
        if all(_apart(a, b, gap) for a in _ends(red) for b in _ends(blue)):
            return Clip(label, (red, blue))
    raise RuntimeError('no two clear paths fit the scene; this is a bug in ShapesVideo')


def _ends(track: Track) -> tuple[tuple[float, float], tuple[float, float]]:
    return track.start, (track.start[0] + track.shift[0], track.start[1] + track.shift[1])


def _flashes(
    rng: np.random.Generator,
    count: int,
    duration: tuple[float, float],
    gap: float,
    span: tuple[float, float] = (0.02, 0.98),
) -> tuple[tuple[float, float], ...]:
    """``count`` windows of ``duration`` inside ``span``, at least ``gap`` apart."""
    lengths = rng.uniform(*duration, size=count)
    spare = (span[1] - span[0]) - lengths.sum() - gap * (count - 1)
    cuts = np.sort(rng.uniform(0.0, spare, size=count))  # the spare time before each flash, cumulated
    windows, t = [], span[0]
    for i in range(count):
        on = t + (cuts[i] - (cuts[i - 1] if i else 0.0))
        windows.append((float(on), float(on + lengths[i])))
        t = on + lengths[i] + gap
    return tuple(windows)


def _flasher(rng: np.random.Generator, visible: tuple[tuple[float, float], ...]) -> tuple[Track, Track | None]:
    """A shape in colour at a fixed place, shown in ``visible``, and a grey spinner away from it."""
    kind, size, reach = _shape(rng)
    spot = _spot(rng, reach)
    angle, spin = _turning(rng)
    flasher = Track(kind, random_color(rng), size, spot, angle=angle, spin=spin, visible=visible)
    return flasher, _spinner(rng, (spot,), reach)


def _count_clip(rng: np.random.Generator) -> Clip:
    label = int(rng.integers(len(COUNTS)))
    flasher, spinner = _flasher(rng, _flashes(rng, label + 1, (0.06, 0.1), 0.2))
    return Clip(label, (flasher,) if spinner is None else (spinner, flasher))


def _half_clip(rng: np.random.Generator) -> Clip:
    label = int(rng.integers(len(HALVES)))
    flasher, spinner = _flasher(rng, _flashes(rng, 1, (0.15, 0.3), 0.0, (0.5 * label + 0.02, 0.5 * label + 0.48)))
    return Clip(label, (flasher,) if spinner is None else (spinner, flasher))


#: task -> (clip generator, class names)
TASKS: dict[str, tuple[Callable[[np.random.Generator], Clip], tuple[str, ...]]] = {
    'direction': (_direction_clip, DIRECTIONS),
    'first_mover': (_first_mover_clip, MOVERS),
    'count': (_count_clip, COUNTS),
    'half': (_half_clip, HALVES),
}


def render_clip(clip: Clip, num_frames: int, image_size: ImageSize, exposure: int | None = None) -> np.ndarray:
    """``clip`` as float32 (T, H, W, 3) in [0, 1], each frame the mean over ``exposure`` instants of its interval."""
    if num_frames < 1:
        raise ValueError(f'num_frames must be a positive int, got {num_frames}')
    exposure = exposure or math.ceil(EXPOSURE_PER_CLIP / num_frames)
    if exposure < 1:
        raise ValueError(f'exposure must be a positive int, got {exposure}')
    height, width = as_hw(image_size)
    frames = np.zeros((num_frames, height, width, 3), dtype=np.float32)
    for i in range(num_frames):
        for j in range(exposure):
            frames[i] += render_scene(clip.scene((i + (j + 0.5) / exposure) / num_frames), (height, width))
    return frames / exposure


@DATASETS.register_module()
class ShapesVideo(Dataset):
    """Procedural video classification where the order and time of events matter; items ``dict(inputs=FloatTensor (3, T,
    H, W), labels=int)``.

    Args:
        task: one of ``TASKS``: 'direction' (4), 'first_mover' (2), 'count' (3), 'half' (2).
        split: 'train', 'val' or 'test'; each draws different clips.
        num_samples: length of the dataset.
        num_frames: frames per clip; another count is the same clip at another frame rate.
        image_size: int or (H, W).
        seed: non-negative int; clip ``i`` depends only on (seed, split, i).
        normalize: map pixel values from [0, 1] to [-1, 1].
        exposure: instants averaged into each frame; None: ``ceil(32 / num_frames)``.
        cache: keep every rendered item in memory (3 T H W float32 each, per worker process).
    """

    def __init__(
        self,
        task: str = 'direction',
        split: str = 'train',
        num_samples: int = 2000,
        num_frames: int = 8,
        image_size: ImageSize = 32,
        seed: int = 0,
        normalize: bool = True,
        exposure: int | None = None,
        cache: bool = False,
    ) -> None:
        check_procedural_args('ShapesVideo', task, TASKS, split, num_samples, seed)
        if num_frames < 1 or (exposure is not None and exposure < 1):
            raise ValueError(f'num_frames and exposure must be positive ints, got {num_frames} and {exposure}')
        self.task, self.split, self.num_samples = task, split, int(num_samples)
        self.num_frames, self.image_size = int(num_frames), as_hw(image_size)
        self.seed, self.normalize, self.exposure = int(seed), normalize, exposure
        self._generate, names = TASKS[task]
        self.classes = list(names)
        self.num_classes = len(self.classes)
        self.metainfo = {'task': task, 'classes': tuple(self.classes), 'num_classes': self.num_classes}
        self._items: dict[int, dict] | None = {} if cache else None

    def __len__(self) -> int:
        return self.num_samples

    def clip(self, index: int) -> Clip:
        rng = np.random.default_rng(
            [self.seed, SPLITS[self.split], check_index('ShapesVideo', index, self.num_samples)]
        )
        return self._generate(rng)

    def render(self, index: int, num_frames: int | None = None, image_size: ImageSize | None = None) -> torch.Tensor:
        """Item ``index`` as an unnormalised float tensor (3, T, H, W) in [0, 1]."""
        return self._render(self.clip(index), num_frames, image_size)

    def _render(self, clip: Clip, num_frames: int | None = None, image_size: ImageSize | None = None) -> torch.Tensor:
        frames = render_clip(clip, num_frames or self.num_frames, image_size or self.image_size, self.exposure)
        return torch.from_numpy(frames.transpose(3, 0, 1, 2).copy())

    def __getitem__(self, index: int) -> dict:
        if self._items is not None and index in self._items:
            return dict(self._items[index])
        clip = self.clip(index)  # drawn once: the frames and the label
        video = self._render(clip)
        if self.normalize:
            video = (video - 0.5) / 0.5
        item = {'inputs': video, 'labels': clip.label}
        if self._items is not None:
            self._items[index] = item
        return dict(item)

    def __repr__(self) -> str:
        return (
            f'ShapesVideo(task={self.task!r}, split={self.split!r}, num_samples={self.num_samples}, '
            f'num_frames={self.num_frames}, image_size={self.image_size}, seed={self.seed}, '
            f'normalize={self.normalize}' + ('' if self.exposure is None else f', exposure={self.exposure}') + ')'
        )


__all__ = ['TASKS', 'Clip', 'ShapesVideo', 'Track', 'render_clip']
