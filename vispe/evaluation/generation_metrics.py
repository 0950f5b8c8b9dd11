"""Offline metrics for class-conditional generation on Shapes2D 'shape_color': objects, attributes, FD and KID.

Objects are 8-connected components of per-colour masks; a shape is the analytic template of best soft IoU (rendered by
shapes2d, placed and sized by the component's moments). FD and KID use a vispe classifier's features."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from kornia.contrib import connected_components_union_find
from torch import nn

from vispe.datasets.scene2d import Color, Scene, Shape, render_scene
from vispe.datasets.shapes2d import PALETTE, SHAPE_COLOR_SHAPES

MIN_COVERAGE = 0.5  # a pixel belongs to an object when the object covers at least half of it: the shape's edge
MAX_RESIDUAL = 0.2  # RGB distance a pixel may stray from (coverage x palette colour) and still count
MIN_AREA = 0.006  # components smaller than this fraction of the image are specks; the smallest object is 0.025
MIN_SHAPE_IOU = 0.75  # below this soft IoU with every template a blob is no shape; rendered shapes score > 0.95
CHUNK = 256  # images segmented at a time


@dataclass
class Component:
    """One object found in an image: palette ``color``, ``area`` (pixels), ``mean_color`` (RGB in [0, 1]), ``bbox``
    (top, left, bottom, right; exclusive), ``mask`` (H, W) and ``coverage`` (H, W) of its colour."""

    color: int
    area: int
    mean_color: tuple[float, float, float]
    bbox: tuple[int, int, int, int]
    mask: torch.Tensor
    coverage: torch.Tensor


# ----------------------------------------------------------------------------------------------------------------
# Colour segmentation and connected components
# ----------------------------------------------------------------------------------------------------------------


def palette_coverage(images: torch.Tensor, palette: Sequence[Color] = PALETTE) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pixel and palette colour c: coverage ``alpha`` in [0, 1] (least squares of c over black) and residual ``|rgb
    - alpha c|``, each (B, K, H, W)."""
    rgb = (images.float() + 1.0) / 2.0
    colors = torch.tensor(palette, dtype=rgb.dtype, device=rgb.device)  # (K, 3)
    alpha = torch.einsum('bchw,kc->bkhw', rgb, colors) / colors.square().sum(-1)[:, None, None]
    alpha = alpha.clamp(0.0, 1.0)
    residual = (rgb[:, None] - alpha[:, :, None] * colors[None, :, :, None, None]).norm(dim=2)
    return alpha, residual


def segment_palette(
    images: torch.Tensor,
    palette: Sequence[Color] = PALETTE,
    min_coverage: float = MIN_COVERAGE,
    max_residual: float = MAX_RESIDUAL,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H, W) palette index per pixel (-1: background) and the (B, K, H, W) coverage of ``palette_coverage``."""
    alpha, residual = palette_coverage(images, palette)
    residual = residual.masked_fill(alpha < min_coverage, math.inf)
    best, index = residual.min(dim=1)
    return index.masked_fill(best > max_residual, -1), alpha


def find_objects(
    images: torch.Tensor,
    palette: Sequence[Color] = PALETTE,
    min_area: float = MIN_AREA,
    min_coverage: float = MIN_COVERAGE,
    max_residual: float = MAX_RESIDUAL,
) -> list[list[Component]]:
    """The objects of each image (``Component``s, largest first): 8-connected components of each palette colour.

    ``images``: (B, 3, H, W) in [-1, 1]; ``palette``: RGB in [0, 1], other colours are background. A pixel is of colour
    c when at least ``min_coverage`` of c over black, within RGB distance ``max_residual``; components smaller than
    ``min_area`` of H * W are dropped.
    """
    if images.shape[0] > CHUNK:  # bounds the (B, K, 3, H, W) temporaries of the colour fit
        return [
            o for part in images.split(CHUNK) for o in find_objects(part, palette, min_area, min_coverage, max_residual)
        ]
    batch, _, height, width = images.shape
    index, alpha = segment_palette(images, palette, min_coverage, max_residual)
    masks = index[:, None] == torch.arange(len(palette), device=index.device)[None, :, None, None]  # (B, K, H, W)
    labels = connected_components_union_find(masks.reshape(-1, 1, height, width)).view(batch, len(palette), -1)
    rgb = ((images.float() + 1.0) / 2.0).flatten(2)  # (B, 3, H * W)
    min_pixels = min_area * height * width
    objects: list[list[Component]] = []
    for b in range(batch):
        found = []
        for k in range(len(palette)):
            ids, counts = labels[b, k].unique(return_counts=True)
            for cid, count in zip(ids.tolist(), counts.tolist()):
                if cid == 0 or count < min_pixels:
                    continue
                flat = labels[b, k] == cid
                found.append(_component(k, flat.view(height, width), rgb[b][:, flat], alpha[b, k]))
        objects.append(sorted(found, key=lambda c: -c.area))
    return objects


def _component(color: int, mask: torch.Tensor, pixels: torch.Tensor, alpha: torch.Tensor) -> Component:
    """A Component from its mask, its pixels' RGB (3, N) and its colour's coverage map (H, W)."""
    rows, cols = mask.any(dim=1).nonzero()[:, 0], mask.any(dim=0).nonzero()[:, 0]
    bbox = (int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1)
    # The anti-aliased rim below 50% coverage lies just outside the mask: a one-pixel dilation takes it in.
    near = F.max_pool2d(mask[None, None].float(), 3, stride=1, padding=1)[0, 0] > 0
    coverage = alpha * near
    red, green, blue = (float(v) for v in pixels.mean(dim=1))
    return Component(color, int(mask.sum()), (red, green, blue), bbox, mask, coverage)


# ----------------------------------------------------------------------------------------------------------------
# Shape identification by template matching
# ----------------------------------------------------------------------------------------------------------------


@cache
def _shape_moments(kind: str) -> tuple[float, float, float]:
    """(area / size^2, centroid offset x / size, centroid offset y / size) of a shape, measured on a fine render."""
    size, res = 0.4, 512
    coverage = render_scene(Scene(0, (Shape(kind, (0.5, 0.5), size, (1.0, 1.0, 1.0)),)), res)[..., 0]
    total = coverage.sum(dtype=np.float64)
    centres = (np.arange(res) + 0.5) / res
    cx = (coverage.sum(0) * centres).sum() / total
    cy = (coverage.sum(1) * centres).sum() / total
    return float(total / res**2 / size**2), float((cx - 0.5) / size), float((cy - 0.5) / size)


def _soft_iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.minimum(a, b).sum() / max(np.maximum(a, b).sum(), 1e-8))


def shape_scores(component: Component, shapes: Sequence[str] = SHAPE_COLOR_SHAPES) -> dict[str, float]:
    """Soft IoU of the component's coverage with each shape, placed at its centroid and sized to its area; the coverage
    is first divided by its upper quartile, so a darker or brighter shade has the same shape."""
    height, width = component.mask.shape
    top, left, bottom, right = component.bbox
    r0, c0, r1, c1 = max(top - 2, 0), max(left - 2, 0), min(bottom + 2, height), min(right + 2, width)
    level = component.coverage[component.mask].double().quantile(0.75).clamp(min=MIN_COVERAGE)
    observed = (component.coverage[r0:r1, c0:c1].double() / level).clamp(max=1.0).cpu().numpy()
    total = observed.sum()
    rows, cols = (np.arange(r0, r1) + 0.5) / height, (np.arange(c0, c1) + 0.5) / width  # scene units
    cy, cx = (observed.sum(1) * rows).sum() / total, (observed.sum(0) * cols).sum() / total
    area = total / (height * width)
    window = (r0 / height, c0 / width, (r1 - r0) / height, (c1 - c0) / width)
    scores = {}
    for kind in shapes:
        area_coef, off_x, off_y = _shape_moments(kind)
        size = math.sqrt(area / area_coef)
        shape = Shape(kind, (cx - off_x * size, cy - off_y * size), size, (1.0, 1.0, 1.0))
        template = render_scene(Scene(0, (shape,)), (r1 - r0, c1 - c0), window)[..., 0]
        scores[kind] = _soft_iou(observed, template)
    return scores


def classify_shape(
    component: Component, shapes: Sequence[str] = SHAPE_COLOR_SHAPES, min_iou: float = MIN_SHAPE_IOU
) -> str | None:
    """The best-matching shape of ``component``, or None when no template reaches ``min_iou``."""
    scores = shape_scores(component, shapes)
    best = max(scores, key=lambda shape: scores[shape])
    return best if scores[best] >= min_iou else None


# ----------------------------------------------------------------------------------------------------------------
# Object metrics
# ----------------------------------------------------------------------------------------------------------------


def object_metrics(
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    shapes: Sequence[str] = SHAPE_COLOR_SHAPES,
    palette: Sequence[Color] = PALETTE,
    min_area: float = MIN_AREA,
    min_iou: float = MIN_SHAPE_IOU,
) -> dict[str, float]:
    """Count, colour, shape and attribute accuracy of images generated for 'shape_color' ``labels`` (colour *
    len(shapes) + shape), each over all samples: one without exactly one object fails all of them."""
    labels = torch.as_tensor(labels).flatten().tolist()
    if len(labels) != images.shape[0]:
        raise ValueError(f'{images.shape[0]} images but {len(labels)} labels')
    hits = np.zeros((len(labels), 4))  # single object, right colour, right shape, both
    found = (objects for part in images.split(CHUNK) for objects in find_objects(part, palette, min_area))
    for i, (objects, label) in enumerate(zip(found, labels)):  # chunk by chunk: only one chunk's masks alive
        if len(objects) != 1:
            continue
        want_color, want_shape = divmod(int(label), len(shapes))
        color_ok = objects[0].color == want_color
        shape_ok = classify_shape(objects[0], shapes, min_iou) == shapes[want_shape]
        hits[i] = (1.0, color_ok, shape_ok, color_ok and shape_ok)
    share = hits.mean(0) if len(labels) else np.zeros(4)
    names = ('count_accuracy', 'color_accuracy', 'shape_accuracy', 'attribute_accuracy')
    return {name: float(v) for name, v in zip(names, share)}


# ----------------------------------------------------------------------------------------------------------------
# Feature distances
# ----------------------------------------------------------------------------------------------------------------


class ShapesFeatures(nn.Module):
    """Pooled pre-logit features of a vispe classifier, as torchmetrics' custom FID / KID feature extractor.

    ``forward``: (B, 3, H, W) in [-1, 1], H and W divisible by the patch -> (B, num_features) float32 at that resolution
    (not resized), so distances compare only sets of one resolution; always eval mode, no grad.

    Args:
        classifier: a vispe ``ImageClassifier`` (its ``backbone`` is used) or a vispe / timm ViT.
        mean: the classifier's input normalisation of images mapped to [0, 1]; 0.5 / 0.5 passes them unchanged.
        std: see ``mean``.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        classifier: nn.Module,
        mean: Sequence[float] = (0.5, 0.5, 0.5),
        std: Sequence[float] = (0.5, 0.5, 0.5),
    ) -> None:
        super().__init__()
        # a timm or vispe ViT (forward_features, forward_head, num_features), whichever class it is
        self.backbone: Any = getattr(classifier, 'backbone', classifier)
        self.num_features = int(getattr(self.backbone, 'head_hidden_size', self.backbone.num_features))
        self.register_buffer('mean', torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('std', torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.train(False)

    def train(self, mode: bool = True) -> ShapesFeatures:
        return super().train(False)  # a feature extractor never trains (dropout, drop path off)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = ((images.float() + 1.0) / 2.0 - self.mean) / self.std  # (B, 3, H, W)
        x = self.backbone.forward_features(x)  # (B, N, D)
        return self.backbone.forward_head(x, pre_logits=True).float()  # (B, D)


def _feed(metric, images: torch.Tensor, real: bool, batch_size: int, device: torch.device) -> None:
    for chunk in images.split(batch_size):
        metric.update(chunk.to(device), real=real)


def _device(module: nn.Module) -> torch.device:
    return next(iter(module.parameters()), torch.empty(0)).device


def frechet_distance(fake: torch.Tensor, real: torch.Tensor, feature_module: nn.Module, batch_size: int = 256) -> float:
    """Frechet distance between the feature Gaussians of ``fake`` and ``real`` (N, 3, H, W) in [-1, 1]."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    metric = FrechetInceptionDistance(feature=feature_module, normalize=False, reset_real_features=True)
    device = _device(feature_module)
    metric = metric.to(device)
    _feed(metric, real, True, batch_size, device)
    _feed(metric, fake, False, batch_size, device)
    return float(metric.compute())


def kernel_distance(
    fake: torch.Tensor,
    real: torch.Tensor,
    feature_module: nn.Module,
    subset_size: int = 1000,
    subsets: int = 100,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[float, float]:
    """KID (mean, std over ``subsets`` subsets of at most ``subset_size``) between ``fake`` and ``real``; drawn from
    ``seed``, the global RNG untouched."""
    from torchmetrics.image.kid import KernelInceptionDistance

    subset_size = min(subset_size, len(fake), len(real))
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Metric `Kernel Inception Distance` will save all extracted')
        metric = KernelInceptionDistance(feature=feature_module, subsets=subsets, subset_size=subset_size)
    device = _device(feature_module)
    metric = metric.to(device)
    _feed(metric, real, True, batch_size, device)
    _feed(metric, fake, False, batch_size, device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mean, std = metric.compute()
    return float(mean), float(std)


def generation_metrics(
    fake: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    real: torch.Tensor | None = None,
    feature_module: nn.Module | None = None,
    shapes: Sequence[str] = SHAPE_COLOR_SHAPES,
    palette: Sequence[Color] = PALETTE,
    kid_subset_size: int = 1000,
    batch_size: int = 256,
) -> dict[str, float]:
    """All offline metrics of ``fake`` (N, 3, H, W) in [-1, 1] generated for ``labels``: the ``object_metrics``
    shares; with ``real`` images of the same resolution and a ``feature_module``, ``fd``, ``kid_mean`` and
    ``kid_std`` too."""
    results = object_metrics(fake, labels, shapes, palette)
    if feature_module is not None:
        if real is None:
            raise ValueError('fd and kid need real images as well as a feature_module')
        if real.shape[1:] != fake.shape[1:]:
            raise ValueError(f'real {tuple(real.shape[1:])} and fake {tuple(fake.shape[1:])} images differ in size')
        results['fd'] = frechet_distance(fake, real, feature_module, batch_size)
        results['kid_mean'], results['kid_std'] = kernel_distance(fake, real, feature_module, kid_subset_size)
    return results
