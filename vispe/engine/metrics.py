"""Metrics for mmengine evaluators."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from mmengine.evaluator import BaseMetric

from vispe.registry import METRICS


@METRICS.register_module()
class Accuracy(BaseMetric):
    """Top-1 accuracy in percent, from per-sample ``{'pred', 'label'}`` predictions; reported as 'accuracy/top1'."""

    default_prefix = 'accuracy'

    def process(self, data_batch: Any, data_samples: Sequence[Dict[str, Any]]) -> None:
        for sample in data_samples:
            self.results.append((int(sample['pred']), int(sample['label'])))

    def compute_metrics(self, results: List[tuple]) -> Dict[str, float]:
        if not results:
            raise ValueError('Accuracy got no predictions: is the evaluation dataset empty?')
        return {'top1': 100.0 * sum(p == y for p, y in results) / len(results)}
