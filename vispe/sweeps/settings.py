"""Evaluate one checkpoint on its test set rebuilt under several settings (data-set overrides), strategies and input
views: what every sweep's cells evaluate."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from mmengine.evaluator import Evaluator

from vispe.evaluation.trained_model import evaluate, set_strategy, settings_loader


class InputView(NamedTuple):
    """A change of every batch's ``inputs`` before the model: ``name`` tells views apart, ``apply`` maps (C, H, W) or
    (B, C, H, W) to the same shape."""

    name: str
    apply: Callable[[Any], Any]


class ViewedLoader:
    """``loader`` with ``view`` applied to each batch's inputs; the same length and data set."""

    def __init__(self, loader, view: InputView) -> None:
        self.loader, self.view, self.dataset = loader, view, loader.dataset

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.loader:
            inputs = batch['inputs']
            seen = [self.view.apply(x) for x in inputs] if isinstance(inputs, list) else self.view.apply(inputs)
            yield dict(batch, inputs=seen)


class SettingsEvaluator:
    """A model and the config's test set under data-set overrides; ``metrics`` runs one pass with a fresh evaluator and
    caches the result per setting."""

    def __init__(self, cfg, model) -> None:
        self.cfg, self.model = cfg, model
        self._loaders: dict[tuple[str, int], Any] = {}
        self._metrics: dict[tuple[str, str, str], dict[str, float]] = {}

    @property
    def batch_size(self) -> int:
        """The config's test batch size: where every cell starts."""
        return int(self.cfg.test_dataloader.batch_size)

    def loader(self, overrides: Mapping[str, Any], batch_size: int):
        key = (json.dumps(dict(overrides), sort_keys=True, default=str), int(batch_size))
        if key not in self._loaders:
            self._loaders[key] = settings_loader(self.cfg, overrides, batch_size)
        return self._loaders[key]

    def metrics(
        self, overrides: Mapping[str, Any], batch_size: int, strategy: str = 'default', view: InputView | None = None
    ) -> dict[str, float]:
        """The test metrics of the model under ``strategy`` and ``overrides``, images changed by ``view`` if given."""
        key = (strategy, json.dumps(dict(overrides), sort_keys=True, default=str), view.name if view else '')
        if key not in self._metrics:
            if strategy != 'default':
                set_strategy(self.model, strategy)
            evaluator = Evaluator(copy.deepcopy(self.cfg.test_evaluator))
            loader = self.loader(overrides, batch_size)
            self._metrics[key] = evaluate(self.model, ViewedLoader(loader, view) if view else loader, evaluator)
        return self._metrics[key]


__all__ = ['InputView', 'SettingsEvaluator', 'ViewedLoader', 'settings_loader']
