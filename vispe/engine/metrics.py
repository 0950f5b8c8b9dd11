"""Metrics for mmengine evaluators."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from mmengine.evaluator import BaseMetric

from vispe.registry import METRICS


@METRICS.register_module()
class Accuracy(BaseMetric):
    """Top-1 accuracy in percent, from per-sample ``{'pred', 'label'}`` predictions; reported as 'accuracy/top1'.

    Args:
        collect_device: where results of the ranks are gathered in distributed evaluation, 'cpu' or 'gpu' (mmengine's
            ``BaseMetric``).
        prefix: the metric names' prefix; None: 'accuracy'.
        collect_dir: folder for gathering results of the ranks when ``collect_device`` is 'cpu'; None: a temporary one.
    """

    default_prefix = 'accuracy'

    def process(self, data_batch: Any, data_samples: Sequence[dict[str, Any]]) -> None:
        for sample in data_samples:
            self.results.append((int(sample['pred']), int(sample['label'])))

    def compute_metrics(self, results: list[tuple]) -> dict[str, float]:
        if not results:
            raise ValueError('Accuracy got no predictions: is the evaluation dataset empty?')
        return {'top1': 100.0 * sum(p == y for p, y in results) / len(results)}


@METRICS.register_module()
class DenoisingLoss(BaseMetric):
    """Mean held-out denoising loss from per-sample ``{'loss'}`` predictions (``DiffusionModel``, mode='predict');
    reported as 'denoising/mse'. Each sample counts once, whatever its resolution.

    Not 'denoising/loss': mmengine's LogProcessor logs every key matching ``.*(loss|time|...).*`` as a mean over the
    last 10 values, so a val metric named '...loss' would show a running mean of past validations.

    Args:
        collect_device: where results of the ranks are gathered in distributed evaluation, 'cpu' or 'gpu' (mmengine's
            ``BaseMetric``).
        prefix: the metric names' prefix; None: 'denoising'.
        collect_dir: folder for gathering results of the ranks when ``collect_device`` is 'cpu'; None: a temporary one.
    """

    default_prefix = 'denoising'

    def process(self, data_batch: Any, data_samples: Sequence[dict[str, Any]]) -> None:
        if data_samples:  # one device sync per batch
            self.results.extend(torch.stack([torch.as_tensor(s['loss']).float() for s in data_samples]).tolist())

    def compute_metrics(self, results: list[float]) -> dict[str, float]:
        if not results:
            raise ValueError('DenoisingLoss got no predictions: is the evaluation dataset empty?')
        return {'mse': sum(results) / len(results)}


@METRICS.register_module()
class Localization3D(BaseMetric):
    """3D localisation error from per-sample ``{'pred', 'target'}`` points (``MultiViewLocalizer``): the mean
    Euclidean error ('loc3d/mean_error', in the data's unit) and the share of samples within ``threshold`` of the
    target ('loc3d/within', in percent).

    Args:
        threshold: the distance, > 0 and in the data's unit, within which a prediction counts for 'loc3d/within'.
        **kwargs: passed to mmengine's ``BaseMetric`` (``collect_device``, ``prefix``: None gives 'loc3d',
            ``collect_dir``).
    """

    default_prefix = 'loc3d'

    def __init__(self, threshold: float = 0.2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if threshold <= 0:
            raise ValueError(f'Localization3D needs threshold > 0, got {threshold}')
        self.threshold = float(threshold)

    def process(self, data_batch: Any, data_samples: Sequence[dict[str, Any]]) -> None:
        if data_samples:
            pred = torch.stack([torch.as_tensor(s['pred']).float().cpu() for s in data_samples])
            target = torch.stack([torch.as_tensor(s['target']).float().cpu() for s in data_samples])
            self.results.extend((pred - target).norm(dim=-1).tolist())

    def compute_metrics(self, results: list[float]) -> dict[str, float]:
        if not results:
            raise ValueError('Localization3D got no predictions: is the evaluation dataset empty?')
        errors = torch.tensor(results)
        return {'mean_error': float(errors.mean()), 'within': 100.0 * float((errors <= self.threshold).float().mean())}
