"""Evaluate one checkpoint on its test set rebuilt under several settings (overrides of the test data set's
arguments): the engine of the point-count / scale and camera sweeps."""

from __future__ import annotations

import copy
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from mmengine.evaluator import Evaluator
from mmengine.runner import Runner

from vispe.evaluation.resolution import build_model, encoding_label, evaluate, progress_bar


def settings_loader(cfg, overrides: Mapping[str, Any]):
    """The config's test loader with ``overrides`` applied to its data set."""
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.dataset.update(dict(overrides))
    return Runner.build_dataloader(loader_cfg, seed=0)


def evaluate_settings(
    cfg,
    checkpoint: str,
    settings: Mapping[str, Mapping[str, Any]],
    device: Optional[str] = None,
    show_progress: bool = True,
) -> Tuple[str, Dict[str, Dict[str, float]]]:
    """(the model's encoding label, {setting name: the test evaluator's metrics}) for each named setting."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model = build_model(cfg, checkpoint, device)
    evaluator = Evaluator(copy.deepcopy(cfg.test_evaluator))
    loaders = {name: settings_loader(cfg, overrides) for name, overrides in settings.items()}
    metrics = {}
    with progress_bar(show_progress) as progress:
        task = progress.add_task('evaluating', total=sum(len(dl) for dl in loaders.values())) if progress else None
        for name, loader in loaders.items():
            if progress:
                progress.update(task, description=name)
            metrics[name] = evaluate(model, loader, evaluator, progress, task)
    return encoding_label(model), metrics


__all__ = ['evaluate_settings', 'settings_loader']
