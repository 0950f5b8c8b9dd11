"""Metrics for mmengine evaluators."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from mmengine.evaluator import BaseMetric

from vispe.registry import METRICS


@METRICS.register_module()
class Accuracy(BaseMetric):
    """Top-1 accuracy in percent from per-sample ``{'pred', 'label'}``, reported as 'accuracy/top1'.

    Args:
        collect_device: where the ranks' results are gathered, 'cpu' or 'gpu'.
        prefix: the metric names' prefix; None: 'accuracy'.
        collect_dir: folder for gathering on 'cpu'; None: a temporary one.
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
    """Mean held-out denoising loss from per-sample ``{'loss'}``, each sample once, reported as 'denoising/mse'.

    Not '.../loss', which mmengine's LogProcessor would show as a running mean.

    Args:
        collect_device: where the ranks' results are gathered, 'cpu' or 'gpu'.
        prefix: the metric names' prefix; None: 'denoising'.
        collect_dir: folder for gathering on 'cpu'; None: a temporary one.
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
    """3D localisation from per-sample ``{'pred', 'target'}``: mean Euclidean error ('loc3d/mean_error') and percent
    within ``threshold`` ('loc3d/within').

    Args:
        threshold: the distance (> 0, the data's unit) within which a prediction counts.
        **kwargs: passed to mmengine's ``BaseMetric``.
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
