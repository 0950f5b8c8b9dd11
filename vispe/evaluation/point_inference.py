"""Classify a user's point-cloud files with a trained point model, in its data set's frame; an unreadable file is
reported in its result."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from vispe.datasets.pointfiles import center, read_points, resample
from vispe.datasets.samples import SKIP_HINT, SampleWarning, few_points_message, read_sample_file
from vispe.engine.checkpoint import load_checkpoint
from vispe.evaluation.trained_model import rank_classes
from vispe.registry import DATASETS

#: the fewest distinct points of a cloud with a shape in 3D (a tetrahedron's corners)
MIN_DISTINCT = 4


def dataset_view(cfg, checkpoint: str | None = None) -> dict:
    """What a file must become to look like the config's test data: ``num_points``, ``frame`` and the class names."""
    data_cfg = cfg.test_dataloader.dataset
    cls = DATASETS.get(data_cfg.type)
    if cls is None or not hasattr(cls, 'frame'):
        raise ValueError(f'the config tests on {data_cfg.type!r}, not a point-cloud data set such as Primitives3D')
    classes = cls.classes
    if checkpoint is not None:
        meta = load_checkpoint(checkpoint).get('meta') or {}
        classes = (meta.get('dataset_meta') or {}).get('classes') or classes
    return {'num_points': int(data_cfg.get('num_points', 1024)), 'frame': cls.frame, 'classes': tuple(classes)}


def load_cloud(path: str, num_points: int, frame: str) -> torch.Tensor:
    """(num_points, 3) float32: the file's points (or mesh surface), farthest-point sampled, then framed.

    A cloud under half of ``num_points``, or with fewer than ``MIN_DISTINCT`` distinct points, is padded with repeats
    and warned about (``SampleWarning``).
    """
    points = read_points(path)
    message = few_points_message(path, len(points), num_points)
    distinct = len(np.unique(points, axis=0))
    if distinct < MIN_DISTINCT:
        message = (
            f'{path}: its {len(points)} points hold only {distinct} distinct position{"s" * (distinct != 1)}, no '
            'shape to classify: the classes below say nothing about it'
        )
    if message:
        warnings.warn(message, SampleWarning, stacklevel=2)
    return torch.from_numpy(center(resample(points, num_points, 'fps'), frame))


def _prepare(path: str, view: dict) -> dict:
    """{'file', 'cloud' or 'error', 'warnings'}: one file read as ``view`` says, its problems caught and named."""
    return read_sample_file(path, 'cloud', lambda: load_cloud(path, view['num_points'], view['frame']))


@torch.no_grad()
def predict_files(
    model: torch.nn.Module, paths: Sequence[str], view: dict, topk: int = 3, batch_size: int = 32
) -> list[dict]:
    """One result per file, in order: ``{'file', 'top': [(class, probability)] * topk, 'warnings'}`` or ``{'file',
    'error', 'warnings'}``."""
    device = next(model.parameters()).device
    results = [_prepare(path, view) for path in paths]
    want = (view['num_points'], 3)
    for result in results:  # one odd cloud must not stop the batch it is stacked into: it is this file's error
        if 'cloud' in result and tuple(result['cloud'].shape) != want:
            shape = tuple(result.pop('cloud').shape)
            result['error'] = f'{result["file"]}: read as {shape} points, not {want}; {SKIP_HINT}'
    return rank_classes(
        results,
        'cloud',
        view['classes'],
        topk,
        batch_size,
        lambda clouds: model(torch.stack(clouds).to(device), mode='tensor'),
    )


__all__ = ['MIN_DISTINCT', 'dataset_view', 'load_cloud', 'predict_files']
