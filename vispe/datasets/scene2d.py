"""2D scenes of coloured shapes in ``[0, 1]^2`` (x right, y down), rendered with analytic anti-aliasing: coverage
``clip(0.5 - sdf * pixels_per_unit, 0, 1)``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ImageSize = int | tuple[int, int]
Color = tuple[float, float, float]

ALL_SHAPES = ('circle', 'square', 'triangle', 'cross', 'diamond')
SNAP = 1e-9  # coverage this close to 0 or 1 is taken as exactly 0 or 1 (rounding residue, not anti-aliasing)

# Polygons with unit half-extent, centred on their bounding box (y down). Scaled by the shape size at render time.
_CROSS_W = 0.35  # half width of the cross's arms: thick enough to stay visible at 32 px
_POLYGONS = {
    'triangle': np.array([(0.0, -0.866), (1.0, 0.866), (-1.0, 0.866)]),  # equilateral, apex up
    'diamond': np.array([(0.0, -1.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0)]),
    'cross': np.array(
        [
            (-_CROSS_W, -1.0),
            (_CROSS_W, -1.0),
            (_CROSS_W, -_CROSS_W),
            (1.0, -_CROSS_W),
            (1.0, _CROSS_W),
            (_CROSS_W, _CROSS_W),
            (_CROSS_W, 1.0),
            (-_CROSS_W, 1.0),
            (-_CROSS_W, _CROSS_W),
            (-1.0, _CROSS_W),
            (-1.0, -_CROSS_W),
            (-_CROSS_W, -_CROSS_W),
        ]
    ),
}


#: per kind, the distance from the centre to the farthest point of the unit shape (what a turn can reach)
_REACH = {'square': math.sqrt(2.0), **{kind: float(np.hypot(*verts.T).max()) for kind, verts in _POLYGONS.items()}}


def reach(kind: str, size: float) -> float:
    """Half the side of a box that holds a shape of that kind and half-extent at any angle."""
    return size * _REACH.get(kind, 1.0)


@dataclass(frozen=True)
class Shape:
    """One filled shape: ``kind`` in ALL_SHAPES, centre (x, y), half-extent ``size``, RGB ``color`` in [0, 1], ``angle``
    in radians (clockwise on screen)."""

    kind: str
    center: tuple[float, float]
    size: float
    color: Color
    angle: float = 0.0

    def bbox(self) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1): a box that contains the shape (a turned one gets its circumscribed circle's)."""
        (cx, cy), s = self.center, self.size
        if self.angle:
            s = reach(self.kind, s)
        return cx - s, cy - s, cx + s, cy + s


@dataclass(frozen=True)
class Scene:
    """A labelled scene; shapes are painted in order, later ones over earlier ones."""

    label: int
    shapes: tuple[Shape, ...]


Window = tuple[float, float, float, float]  # (top, left, height, width) as fractions of the full scene
FULL_WINDOW: Window = (0.0, 0.0, 1.0, 1.0)


def as_hw(image_size: ImageSize) -> tuple[int, int]:
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    if len(image_size) != 2 or not all(isinstance(v, int) and v > 0 for v in image_size):
        raise ValueError(f'image_size must be a positive int or (H, W) pair of them, got {image_size!r}')
    return int(image_size[0]), int(image_size[1])


@lru_cache(maxsize=32)
def _pixel_centres(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    x = ((np.arange(width) + 0.5) / width)[None, :]
    y = ((np.arange(height) + 0.5) / height)[:, None]
    x.flags.writeable = False  # shared through the cache
    y.flags.writeable = False
    return x, y


def _box_sdf(px: np.ndarray, py: np.ndarray, half: float) -> np.ndarray:
    """Signed distance to an axis-aligned square of half side ``half`` centred on the origin."""
    qx, qy = np.abs(px) - half, np.abs(py) - half
    outside = np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0))
    return outside + np.minimum(np.maximum(qx, qy), 0.0)


def _polygon_sdf(px: np.ndarray, py: np.ndarray, verts: np.ndarray) -> np.ndarray:
    """Signed distance to a simple polygon (negative inside), after Inigo Quilez's sdPolygon."""
    px, py = np.broadcast_arrays(px, py)
    d2 = (px - verts[0, 0]) ** 2 + (py - verts[0, 1]) ** 2
    sign = np.ones_like(d2)
    for i in range(len(verts)):
        (vix, viy), (vjx, vjy) = verts[i], verts[i - 1]
        ex, ey = vjx - vix, vjy - viy
        wx, wy = px - vix, py - viy
        t = np.clip((wx * ex + wy * ey) / (ex * ex + ey * ey), 0.0, 1.0)
        d2 = np.minimum(d2, (wx - ex * t) ** 2 + (wy - ey * t) ** 2)
        # Winding test: crossing this edge's span flips inside/outside.
        c1, c2, c3 = py >= viy, py < vjy, ex * wy > ey * wx
        sign[(c1 & c2 & c3) | ~(c1 | c2 | c3)] *= -1.0
    return sign * np.sqrt(d2)


def shape_sdf(shape: Shape, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Signed distance (scene units, negative inside) from points (x, y) to ``shape``."""
    px, py = x - shape.center[0], y - shape.center[1]
    if shape.angle and shape.kind != 'circle':  # the points turned back by the shape's angle
        cos, sin = math.cos(shape.angle), math.sin(shape.angle)
        px, py = cos * px + sin * py, cos * py - sin * px
    if shape.kind == 'circle':
        return np.hypot(px, py) - shape.size
    if shape.kind == 'square':
        return _box_sdf(px, py, shape.size)
    if shape.kind in _POLYGONS:
        return _polygon_sdf(px, py, _POLYGONS[shape.kind] * shape.size)
    raise ValueError(f'unknown shape kind {shape.kind!r}; valid: {ALL_SHAPES}')


def render_scene(scene: Scene, image_size: ImageSize, window: Window | None = None) -> np.ndarray:
    """Render ``scene`` to float32 (H, W, 3) in [0, 1] on black. Non-square sizes stretch the scene; the anti-aliasing
    ramp uses the geometric mean of the two pixel densities. ``window`` (top, left, height, width, scene units) renders
    that part stretched to ``image_size``."""
    height, width = as_hw(image_size)
    x, y = _pixel_centres(height, width)
    pixels_per_unit = math.sqrt(height * width)
    top, left, win_h, win_w = window or FULL_WINDOW
    if window is not None:
        x, y = left + x * win_w, top + y * win_h
        pixels_per_unit = math.sqrt(height * width / (win_h * win_w))
    image = np.zeros((height, width, 3), dtype=np.float32)
    for shape in scene.shapes:
        # Only the pixels near the shape's box can be covered: evaluating there keeps large renders cheap.
        x0, y0, x1, y1 = shape.bbox()
        if window is not None:  # the box in window units, so the pixel ranges below stay the same code
            x0, x1, y0, y1 = (x0 - left) / win_w, (x1 - left) / win_w, (y0 - top) / win_h, (y1 - top) / win_h
        c0, c1 = max(int(x0 * width) - 1, 0), min(math.ceil(x1 * width) + 1, width)
        r0, r1 = max(int(y0 * height) - 1, 0), min(math.ceil(y1 * height) + 1, height)
        if c0 >= c1 or r0 >= r1:
            continue
        sdf = shape_sdf(shape, x[:, c0:c1], y[r0:r1, :])
        coverage = np.clip(0.5 - sdf * pixels_per_unit, 0.0, 1.0)
        # a pixel centre half a pixel from an edge is exactly covered or not, not off by a rounding residue (~1e-16):
        # a shape on pixel boundaries (Three-Cell's cells) then fills whole pixels and nothing beside them
        coverage = np.where(coverage < SNAP, 0.0, np.where(coverage > 1.0 - SNAP, 1.0, coverage))
        alpha = coverage.astype(np.float32)[..., None]
        patch = image[r0:r1, c0:c1]
        patch *= 1.0 - alpha  # 'over' compositing, so a later shape hides what it covers
        patch += alpha * np.asarray(shape.color, dtype=np.float32)
    return image


def to_uint8(image: np.ndarray) -> np.ndarray:
    return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


__all__ = [
    'ALL_SHAPES',
    'FULL_WINDOW',
    'Color',
    'ImageSize',
    'Scene',
    'Shape',
    'Window',
    'as_hw',
    'reach',
    'render_scene',
    'shape_sdf',
    'to_uint8',
]
