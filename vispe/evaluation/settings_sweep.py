"""Evaluate one checkpoint on its test set rebuilt under several settings (overrides of the test data set's
arguments) and strategies: the cells that the resolution, point-count / scale, camera and generation sweeps hand to
``vispe.evaluation.sweep_engine``."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from mmengine.evaluator import Evaluator
from mmengine.runner import Runner

from vispe.evaluation.checkpoints import evaluate, set_strategy


def settings_loader(cfg, overrides: Mapping[str, Any], batch_size: int | None = None):
    """The config's test loader with ``overrides`` applied to its data set (and another batch size when given)."""
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.dataset.update(dict(overrides))
    if batch_size is not None:
        loader_cfg.batch_size = int(batch_size)
    return Runner.build_dataloader(loader_cfg, seed=0)


class SettingsEvaluator:
    """A model and the config's test set under data-set overrides: ``metrics(overrides, batch_size, strategy)`` runs
    one pass (with a fresh evaluator, so an attempt cut short by an out-of-memory error leaves nothing behind) and
    keeps the result, so a setting that two cells share (the training setting of both point sweeps) runs once.
    Loaders are built once per setting and batch size."""

    def __init__(self, cfg, model) -> None:
        self.cfg, self.model = cfg, model
        self._loaders: dict[tuple[str, int], Any] = {}
        self._metrics: dict[tuple[str, str], dict[str, float]] = {}

    @property
    def batch_size(self) -> int:
        """The config's test batch size: where every cell starts."""
        return int(self.cfg.test_dataloader.batch_size)

    def loader(self, overrides: Mapping[str, Any], batch_size: int):
        key = (json.dumps(dict(overrides), sort_keys=True, default=str), int(batch_size))
        if key not in self._loaders:
            self._loaders[key] = settings_loader(self.cfg, overrides, batch_size)
        return self._loaders[key]

    def metrics(self, overrides: Mapping[str, Any], batch_size: int, strategy: str = 'default') -> dict[str, float]:
        """The test evaluator's metrics of the model under ``strategy`` on the test set with ``overrides``."""
        key = (strategy, json.dumps(dict(overrides), sort_keys=True, default=str))
        if key not in self._metrics:
            if strategy != 'default':
                set_strategy(self.model, strategy)
            evaluator = Evaluator(copy.deepcopy(self.cfg.test_evaluator))
            self._metrics[key] = evaluate(self.model, self.loader(overrides, batch_size), evaluator)
        return self._metrics[key]


__all__ = ['SettingsEvaluator', 'settings_loader']
