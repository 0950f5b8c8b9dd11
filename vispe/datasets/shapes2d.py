"""Shapes2D: procedural image classification where the position of things matters; scenes (``vispe.datasets.scene2d``)
drawn from ``(seed, split, index)`` and rendered analytically at any resolution, crops without resampling blur."""

from __future__ import annotations

import colorsys
import math
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from vispe.datasets import three_cell
from vispe.datasets.scene2d import (
    ALL_SHAPES,
    FULL_WINDOW,
    Color,
    ImageSize,
    Scene,
    Shape,
    Window,
    as_hw,
    render_scene,
    to_uint8,
)
from vispe.datasets.sizes import SizedIndex, SizePolicy, build_size_policy, item_size, split_index
from vispe.registry import DATASETS

SPLITS = {'train': 0, 'val': 1, 'test': 2}
BASIC_SHAPES = ('circle', 'square', 'triangle')
CELL_NAMES = tuple(f'{row}-{col}' for row in ('top', 'middle', 'bottom') for col in ('left', 'center', 'right'))
DIRECTIONS = ('right', 'down', 'left', 'up')  # where the blue object is, seen from the red one
PAIRS = ((0, 1), (0, 2), (1, 2))  # indices into (red, green, blue)
PAIR_NAMES = ('red-green', 'red-blue', 'green-blue')

RED: Color = (1.0, 0.15, 0.15)
GREEN: Color = (0.0, 1.0, 0.0)
BLUE: Color = (0.15, 0.35, 1.0)
GREY: Color = (0.55, 0.55, 0.55)
PURE_RGB: tuple[Color, Color, Color] = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
YELLOW: Color = (1.0, 1.0, 0.1)

# The 'shape_color' task: one object whose class is a (colour, shape) pair. As RGB directions the palette's colours
# are 36 degrees or more apart, so a pixel's colour is recognisable from its direction alone, anti-aliased edges
# (the colour scaled towards the black background) included.
COLOR_NAMES = ('red', 'green', 'blue', 'yellow')
PALETTE: tuple[Color, ...] = (RED, GREEN, BLUE, YELLOW)
SHAPE_COLOR_SHAPES = ALL_SHAPES
SHAPE_COLOR_SIZES = (0.12, 0.24)  # half-extent range: at least 7.7 px across at 32 px, so the five shapes differ
SHAPE_COLOR_CLASSES = tuple(f'{color} {kind}' for color in COLOR_NAMES for kind in SHAPE_COLOR_SHAPES)

MARGIN = 0.02  # gap (scene units) kept between an object and the image border or its cell border
THREE_CELL_GRID = 6
THREE_CELL_MARGIN = 0.5  # in cells: the farthest pair must beat the second farthest by this much
RELATION_MARGIN = 0.15  # the dominant axis of the displacement beats the other one by this much
MAX_TRIES = 1000

# ----------------------------------------------------------------------------------------------------------------
# Scene generators, one per task: each draws the label first (uniformly) and then a scene for it.
# ----------------------------------------------------------------------------------------------------------------


def random_color(rng: np.random.Generator) -> Color:
    """A saturated, bright colour, so objects always stand out from the black background."""
    h, s, v = rng.uniform(0.0, 1.0), rng.uniform(0.5, 1.0), rng.uniform(0.7, 1.0)
    r, g, b = colorsys.hsv_to_rgb(h, s, v)
    return float(r), float(g), float(b)


def _position_scene(rng: np.random.Generator) -> Scene:
    """One object of a basic shape inside one cell of a 3x3 grid; label = cell * 3 + shape."""
    label = int(rng.integers(len(CELL_NAMES) * len(BASIC_SHAPES)))
    cell, kind = divmod(label, len(BASIC_SHAPES))
    row, col = divmod(cell, 3)
    size = rng.uniform(0.06, 0.10)  # at most 0.10: the shape plus margins fits a 1/3 cell with room for jitter
    lo, hi = size + MARGIN, 1.0 / 3.0 - size - MARGIN
    center = (col / 3.0 + rng.uniform(lo, hi), row / 3.0 + rng.uniform(lo, hi))
    return Scene(label, (Shape(BASIC_SHAPES[kind], center, size, random_color(rng)),))


def _uniform_center(rng: np.random.Generator, size: float) -> tuple[float, float]:
    lo, hi = size + MARGIN, 1.0 - size - MARGIN
    return float(rng.uniform(lo, hi)), float(rng.uniform(lo, hi))


def _boxes_apart(a: Shape, b: Shape, gap: float) -> bool:
    ax0, ay0, ax1, ay1 = a.bbox()
    bx0, by0, bx1, by1 = b.bbox()
    return max(bx0 - ax1, ax0 - bx1, by0 - ay1, ay0 - by1) >= gap


def _relation_scene(rng: np.random.Generator) -> Scene:
    """A red and a blue object (plus maybe a grey distractor); label = direction from red to blue."""
    label = int(rng.integers(len(DIRECTIONS)))
    axis, sign = label % 2, (1.0 if label < 2 else -1.0)  # right/down are +x/+y, left/up are -x/-y
    kinds = rng.integers(len(BASIC_SHAPES), size=3)
    sizes = rng.uniform(0.05, 0.08, size=3)
    red_c = blue_c = (0.5, 0.5)
    for _ in range(MAX_TRIES):
        red_c = _uniform_center(rng, sizes[0])
        major = rng.uniform(max(0.2, sizes[0] + sizes[1] + 0.05), 0.8)  # far enough that the objects never touch
        minor = rng.uniform(-(major - RELATION_MARGIN), major - RELATION_MARGIN)  # keeps the dominant axis clear
        delta = [0.0, 0.0]
        delta[axis], delta[1 - axis] = sign * major, minor
        blue_c = (red_c[0] + delta[0], red_c[1] + delta[1])
        lo, hi = sizes[1] + MARGIN, 1.0 - sizes[1] - MARGIN
        if lo <= blue_c[0] <= hi and lo <= blue_c[1] <= hi:
            break
    else:
        raise RuntimeError('could not place the relation objects')  # unreachable in practice: ~1/3 tries succeed
    red = Shape(BASIC_SHAPES[kinds[0]], red_c, float(sizes[0]), RED)
    blue = Shape(BASIC_SHAPES[kinds[1]], blue_c, float(sizes[1]), BLUE)
    shapes = [red, blue]
    if rng.uniform() < 0.5:
        for _ in range(50):  # a distractor that would touch red or blue is dropped rather than forced
            grey = Shape(BASIC_SHAPES[kinds[2]], _uniform_center(rng, sizes[2]), float(sizes[2]), GREY)
            if _boxes_apart(grey, red, 0.03) and _boxes_apart(grey, blue, 0.03):
                shapes.append(grey)
                break
    return Scene(label, tuple(shapes))


def _three_cell_scene(rng: np.random.Generator) -> Scene:
    """Three cells of a 6x6 grid painted red, green, blue; label = the pair of colours farthest apart."""
    label = int(rng.integers(len(PAIRS)))
    n = THREE_CELL_GRID
    for _ in range(MAX_TRIES):
        cells = rng.choice(n * n, size=3, replace=False)
        rc = np.stack(np.divmod(cells, n), axis=1).astype(float)  # (row, col) per cell
        dists = [float(np.linalg.norm(rc[i] - rc[j])) for i, j in PAIRS]
        second, first = sorted(dists)[-2:]
        if first - second >= THREE_CELL_MARGIN:
            break
    else:
        raise RuntimeError('could not draw three cells with a clear farthest pair')  # unreachable in practice
    # Give the farthest pair the labelled colours (in random order) rather than rejecting: labels stay uniform.
    far = PAIRS[int(np.argmax(dists))]
    near = 3 - far[0] - far[1]
    want = PAIRS[label]
    colour_of = {far[0]: want[0], far[1]: want[1], near: 3 - want[0] - want[1]}
    if rng.uniform() < 0.5:
        colour_of[far[0]], colour_of[far[1]] = want[1], want[0]
    shapes = tuple(
        Shape('square', ((c + 0.5) / n, (r + 0.5) / n), 0.5 / n, PURE_RGB[colour_of[k]]) for k, (r, c) in enumerate(rc)
    )
    return Scene(label, shapes)


def _shape_scene(rng: np.random.Generator) -> Scene:
    """One object of five shapes, anywhere, any size: the control task where position does not matter."""
    label = int(rng.integers(len(ALL_SHAPES)))
    size = float(rng.uniform(0.08, 0.25))
    return Scene(label, (Shape(ALL_SHAPES[label], _uniform_center(rng, size), size, random_color(rng)),))


def _shape_color_scene(rng: np.random.Generator) -> Scene:
    """One object of a palette colour and one of five shapes, anywhere; label = colour * 5 + shape."""
    label = int(rng.integers(len(SHAPE_COLOR_CLASSES)))
    color, kind = divmod(label, len(SHAPE_COLOR_SHAPES))
    size = float(rng.uniform(*SHAPE_COLOR_SIZES))
    return Scene(label, (Shape(SHAPE_COLOR_SHAPES[kind], _uniform_center(rng, size), size, PALETTE[color]),))


def shape_color_of(label: int) -> tuple[str, str]:
    """(shape, colour name) of a 'shape_color' label, e.g. 7 -> ('triangle', 'green')."""
    color, kind = divmod(int(label), len(SHAPE_COLOR_SHAPES))
    return SHAPE_COLOR_SHAPES[kind], COLOR_NAMES[color]


#: the tasks whose label says where things lie in the image (a cell, a distance from the centre): translating the
#: image changes the right answer, so an accuracy under translation (eval-patch-shift) is not robustness alone
POSITION_LABELLED_TASKS = frozenset({'position', 'three_cell_loope'})

TASKS: dict[str, tuple[Callable[[np.random.Generator], Scene], tuple[str, ...]]] = {
    'position': (_position_scene, tuple(f'{cell}-{kind}' for cell in CELL_NAMES for kind in BASIC_SHAPES)),
    'relation': (_relation_scene, DIRECTIONS),
    'three_cell': (_three_cell_scene, PAIR_NAMES),
    'three_cell_loope': (three_cell.three_cell_scene, three_cell.CLASSES),
    'shape': (_shape_scene, ALL_SHAPES),
    'shape_color': (_shape_color_scene, SHAPE_COLOR_CLASSES),
}


# ----------------------------------------------------------------------------------------------------------------
# Random resized crops, drawn in scene units
# ----------------------------------------------------------------------------------------------------------------


def random_window(
    rng: np.random.Generator, scale: tuple[float, float], ratio: tuple[float, float], aspect: float = 1.0
) -> Window:
    """A window (top, left, height, width) in scene units, drawn like RandomResizedCrop: area uniform in ``scale``,
    pixel aspect (image aspect ``aspect`` = W / H) log-uniform in ``ratio``, position uniform."""
    area = rng.uniform(*scale)
    log_ratio = rng.uniform(math.log(ratio[0]), math.log(ratio[1]))
    pixel_ratio = math.exp(log_ratio) / aspect  # width / height in scene units
    win_h, win_w = min(math.sqrt(area / pixel_ratio), 1.0), min(math.sqrt(area * pixel_ratio), 1.0)
    top, left = rng.uniform(0.0, 1.0 - win_h), rng.uniform(0.0, 1.0 - win_w)
    return float(top), float(left), float(win_h), float(win_w)


# ----------------------------------------------------------------------------------------------------------------
# Dataset
# ----------------------------------------------------------------------------------------------------------------


def check_procedural_args(name: str, task: str, tasks: dict, split: str, num_samples: int, seed: int) -> None:
    if task not in tasks:
        raise ValueError(f'unknown {name} task {task!r}; valid tasks: {sorted(tasks)}')
    if split not in SPLITS:
        raise ValueError(f'unknown split {split!r}; valid splits: {list(SPLITS)}')
    if num_samples < 0 or seed < 0:
        raise ValueError(f'num_samples and seed must be non-negative, got {num_samples} and {seed}')


def check_index(name: str, index: int, length: int) -> int:
    """Python-style indexing into ``length`` items (negative from the end); IndexError out of range."""
    if not -length <= index < length:
        raise IndexError(f'index {index} out of range for {name} of length {length}')
    return index % length


@DATASETS.register_module()
class Shapes2D(Dataset):
    """Procedural shape scenes for probing positional encodings, rendered at any resolution. Items are
    ``dict(inputs=FloatTensor (3, H, W), labels=int)``, with ``return_crop`` also ``crop=FloatTensor(4)``, the
    window's (top, left, height, width) as fractions of the image.

    Args:
        task: one of ``TASKS``: 'position' (27 classes: 3x3 cell x 3 shapes), 'relation' (4: direction from red to
            blue), 'three_cell' (3: farthest pair of cells on 6 x 6), 'three_cell_loope' (6: LOOPE's benchmark on 14 x
            14, ``vispe.datasets.three_cell``), 'shape' (5), 'shape_color' (20: colour x shape).
        split: 'train', 'val' or 'test'; each draws different scenes.
        num_samples: length of the dataset.
        image_size: int or (H, W); a non-square size stretches the scene.
        seed: non-negative int; item ``i`` depends only on (seed, split, i).
        normalize: map pixel values from [0, 1] to [-1, 1].
        crop_scale: (min, max) area of a random window, rendered at ``image_size``; drawn from its own stream, so scenes
            are the same with and without it. None: the whole scene.
        crop_ratio: (min, max) aspect ratio (width / height, output pixels) of the window.
        return_crop: add ``crop`` to the items; default: whenever ``crop_scale`` is set.
        size_policy: render each item at the size a policy (``vispe.datasets.sizes``) draws, not ``image_size``.
    """

    def __init__(
        self,
        task: str = 'position',
        split: str = 'train',
        num_samples: int = 2000,
        image_size: ImageSize = 32,
        seed: int = 0,
        normalize: bool = True,
        crop_scale: tuple[float, float] | None = None,
        crop_ratio: tuple[float, float] = (1.0, 1.0),
        return_crop: bool | None = None,
        size_policy: SizePolicy | dict | None = None,
    ) -> None:
        check_procedural_args('Shapes2D', task, TASKS, split, num_samples, seed)
        if crop_scale is not None and not 0.0 < crop_scale[0] <= crop_scale[1] <= 1.0:
            raise ValueError(f'crop_scale must be (min, max) with 0 < min <= max <= 1, got {crop_scale!r}')
        if not 0.0 < crop_ratio[0] <= crop_ratio[1]:
            raise ValueError(f'crop_ratio must be (min, max) with 0 < min <= max, got {crop_ratio!r}')
        self.crop_scale = None if crop_scale is None else (float(crop_scale[0]), float(crop_scale[1]))
        self.crop_ratio = (float(crop_ratio[0]), float(crop_ratio[1]))
        self.return_crop = crop_scale is not None if return_crop is None else bool(return_crop)
        self.task, self.split, self.num_samples = task, split, int(num_samples)
        self.image_size, self.seed, self.normalize = as_hw(image_size), int(seed), normalize
        self.size_policy = build_size_policy(size_policy)
        self._generate, names = TASKS[task]
        self.classes = list(names)
        self.num_classes = len(self.classes)
        self.metainfo = {
            'task': task,
            'classes': tuple(self.classes),
            'num_classes': self.num_classes,
            'label_moves_with_image': task in POSITION_LABELLED_TASKS,
        }
        if task == 'shape_color':
            self.metainfo.update(shapes=SHAPE_COLOR_SHAPES, colors=dict(zip(COLOR_NAMES, PALETTE)))

    def __len__(self) -> int:
        return self.num_samples

    def _check_index(self, index: int) -> int:
        return check_index('Shapes2D', index, self.num_samples)

    def scene(self, index: int) -> Scene:
        index = self._check_index(index)
        rng = np.random.default_rng([self.seed, SPLITS[self.split], index])
        return self._generate(rng)

    def crop_box(self, index: int) -> Window:
        """(top, left, height, width) of item ``index``'s window as fractions of the scene; (0, 0, 1, 1) if off."""
        index = self._check_index(index)
        if self.crop_scale is None:
            return FULL_WINDOW
        rng = np.random.default_rng([self.seed, SPLITS[self.split], index, 1])  # not the scene's stream
        height, width = self.image_size
        return random_window(rng, self.crop_scale, self.crop_ratio, aspect=width / height)

    def render_numpy(self, index: int, image_size: ImageSize | None = None, window: Window | None = None) -> np.ndarray:
        """Item ``index`` as float32 (H, W, 3) in [0, 1] at ``image_size``, the scene or ``window`` (no random crop)."""
        return render_scene(self.scene(index), image_size or self.image_size, window)

    def render(self, index: int, image_size: ImageSize | None = None) -> torch.Tensor:
        """Item ``index`` as an unnormalised float tensor (3, H, W) in [0, 1], at any size."""
        return torch.from_numpy(self.render_numpy(index, image_size).transpose(2, 0, 1).copy())

    def render_uint8(self, index: int, image_size: ImageSize | None = None) -> np.ndarray:
        return to_uint8(self.render_numpy(index, image_size))

    def __getitem__(self, index: int | SizedIndex) -> dict:
        index, key = split_index(index)
        scene = self.scene(index)
        window = None if self.crop_scale is None else self.crop_box(index)
        size = item_size(self.size_policy, self.image_size, key)
        image = torch.from_numpy(render_scene(scene, size, window).transpose(2, 0, 1).copy())
        if self.normalize:
            image = (image - 0.5) / 0.5
        item = {'inputs': image, 'labels': scene.label}
        if self.return_crop:
            item['crop'] = torch.tensor(window or FULL_WINDOW, dtype=torch.float32)
        return item

    def __repr__(self) -> str:
        return (
            f'Shapes2D(task={self.task!r}, split={self.split!r}, num_samples={self.num_samples}, '
            f'image_size={self.image_size}, seed={self.seed}, normalize={self.normalize}'
            + ('' if self.crop_scale is None else f', crop_scale={self.crop_scale}, crop_ratio={self.crop_ratio}')
            + ('' if self.return_crop == (self.crop_scale is not None) else f', return_crop={self.return_crop}')
            + ('' if self.size_policy is None else f', size_policy={self.size_policy!r}')
            + ')'
        )
