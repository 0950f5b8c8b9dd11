"""Evaluate one checkpoint at several resolutions (and resolution strategies), as data and as a plot.

The JSON schema written by ``tools/eval_resolution.py`` (cell by cell, through ``vispe.evaluation.sweep_engine``,
which adds ``failed``, ``complete`` and the identity fields it documents)::

    {"config": ..., "checkpoint": ..., "train_resolution": ..., "metric": "accuracy",
     "results": [{"encoding": ..., "strategy": ..., "resolution": ..., "value": ...}, ...]}
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope

from vispe.engine.checkpoint import load_checkpoint
from vispe.engine.run_meta import trained_on
from vispe.evaluation import report
from vispe.evaluation.sweep_engine import Cell, Log, run_sweep, sweep_identity
from vispe.registry import MODELS

Resolution = int | tuple[int, int]


def parse_resolution(text: str) -> Resolution:
    """'64' -> 64, '48x64' -> (48, 64) (height x width)."""
    parts = text.lower().split('x')
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f'resolution {text!r} is not an int or HxW (e.g. 64 or 48x64)') from None
    if len(values) not in (1, 2) or min(values) <= 0:
        raise ValueError(f'resolution {text!r} is not a positive int or HxW (e.g. 64 or 48x64)')
    return values[0] if len(values) == 1 else (values[0], values[1])


def resolution_label(res: Resolution) -> str:
    """64 -> '64', (48, 64) or [48, 64] (as JSON reads it back) -> '48x64'; a label stays as it is."""
    return str(res) if isinstance(res, (int, str)) else f'{res[0]}x{res[1]}'


def train_resolution(cfg, meta: dict | None = None) -> Resolution:
    """The resolution the model was trained at: the checkpoint's ``meta`` (RunMetaHook records it), else the
    config's training data set's image_size (what a --cfg-options override changes), else the config's top-level
    ``train_resolution``."""
    res = trained_on(cfg, meta, 'train_resolution')
    if res is None:
        raise ValueError(
            'neither the checkpoint meta nor the config (train_dataloader.dataset.image_size, train_resolution) '
            'gives the training resolution'
        )
    return res


def load_model(cfg, checkpoint: str, device: str) -> tuple[torch.nn.Module, dict]:
    """(the config's model with the checkpoint's weights, on ``device``, in eval mode; the checkpoint's meta). The
    checkpoint must fit the model key for key, unless the config says ``load_strict = False`` (``--non-strict``)."""
    init_default_scope(cfg.get('default_scope', 'vispe'))
    model = MODELS.build(copy.deepcopy(cfg.model))
    ckpt = load_checkpoint(checkpoint, model, strict=cfg.get('load_strict', True))
    return model.to(device).eval(), dict(ckpt.get('meta') or {})


def build_model(cfg, checkpoint: str, device: str) -> torch.nn.Module:
    return load_model(cfg, checkpoint, device)[0]


def model_encodings(model: torch.nn.Module) -> list[Any]:
    """Every encoding instance in the model."""
    from vispe.encodings.base import Encoding

    return [m for m in model.modules() if isinstance(m, Encoding)]


def encoding_label(model: torch.nn.Module) -> str:
    backbone = getattr(model, 'backbone', model)
    names = getattr(backbone, 'encoding_names', None)
    return '+'.join(names) if names else 'none'


def available_strategies(model: torch.nn.Module) -> list[str]:
    """Resolution strategies the model's encodings support, defaults first; ['default'] when none do."""
    seen: list[str] = []
    for enc in model_encodings(model):
        for s in type(enc).strategies:
            if s not in seen:
                seen.append(s)
    return seen or ['default']


def set_strategy(model: torch.nn.Module, strategy: str) -> None:
    """Switch every encoding that supports ``strategy``; others keep their own."""
    for enc in model_encodings(model):
        if strategy in type(enc).strategies:
            enc.strategy = strategy


@torch.no_grad()
def evaluate(model, loader, evaluator: Evaluator, progress=None, task=None) -> dict[str, float]:
    """One pass over ``loader`` with model.test_step; returns the evaluator's metrics."""
    for batch in loader:
        evaluator.process(data_samples=model.test_step(batch), data_batch=batch)
        if progress is not None:
            progress.advance(task)
    return evaluator.evaluate(len(loader.dataset))


def check_strategies(model: torch.nn.Module, strategies: Sequence[str] | None) -> list[str]:
    """``strategies``, or every one the model supports; ValueError naming the supported ones for others."""
    supported = available_strategies(model)
    strategies = list(strategies or supported)
    unknown = [s for s in strategies if s not in supported]
    if unknown:
        raise ValueError(f"strategies {unknown} are not supported by this model's encodings; choose from {supported}")
    return strategies


def sweep(
    cfg,
    checkpoint: str,
    resolutions: Sequence[Resolution],
    strategies: Sequence[str] | None = None,
    device: str | None = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` at each resolution and strategy, one cell each; returns the results dict (schema
    above). With ``out_dir``, ``out_dir/results.json`` is written as each cell finishes and a rerun reuses the
    finished cells (``force``: recompute them; sweep_engine)."""
    from vispe.evaluation.settings_sweep import SettingsEvaluator  # it builds on this module's helpers

    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = load_model(cfg, checkpoint, device)
    strategies = check_strategies(model, strategies)
    label, settings = encoding_label(model), SettingsEvaluator(cfg, model)

    def cell(strategy: str, res: Resolution) -> Cell:
        key = {'encoding': label, 'strategy': strategy, 'resolution': res}

        def run(batch_size: int) -> list[dict[str, Any]]:
            metrics = settings.metrics({'image_size': res}, batch_size, strategy)
            return [dict(key, value=metrics[metric_key])]

        return Cell(f'{strategy} @ {resolution_label(res)}', key, run, settings.batch_size)

    header = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'train_resolution': train_resolution(cfg, meta),
        'metric': metric_key.split('/')[0],
    }
    cells = [cell(s, r) for s in strategies for r in resolutions]
    identity = sweep_identity('resolution', cfg, checkpoint, metric_key=metric_key)
    return run_sweep(cells, header, identity, out_dir, force, show_progress, log)


def write_json(results: dict[str, Any], path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(results, f, indent=2)
    return path


def resolution_column(row: dict[str, Any]) -> str:
    """A row's resolution as a table column / figure tick: '32', or '32x48' (height x width)."""
    return resolution_label(row['resolution'])


def results_pivot(rows: Iterable[dict[str, Any]], ordered: bool = False) -> report.Pivot:
    """One line per (encoding, strategy), one column per resolution: as they first appear, or (``ordered``) by
    pixel count then height, the order of the figures' x axis."""
    return report.pivot(
        list(rows), ('encoding', 'strategy'), resolution_column, order=report.resolution_order if ordered else None
    )


def results_table(
    rows: Iterable[dict[str, Any]],
    title: str = '',
    metric: str = 'accuracy',
    fmt: str = '.1f',
    failed: Iterable[dict[str, Any]] = (),
):
    """A rich Table: one row per (encoding, strategy), one column per resolution; values formatted with ``fmt``,
    'failed' where a cell of ``failed`` (results.json's) ran out of memory even at batch size 1."""
    table = results_pivot([*rows, *(dict(f, value=FAILED) for f in failed)])
    return report.rich_table(table, ['encoding', 'strategy'], title or f'{metric} by test resolution', fmt)


#: a table's text for a cell that did not fit in memory (results.json's ``failed``)
FAILED = 'failed'


def line_label(key: tuple[str, str]) -> str:
    """A figure's legend entry: the encoding, with its strategy unless that is 'default' (encodings without any)."""
    enc, strat = key
    return enc if strat == 'default' else f'{enc} ({strat})'


def plot_results(
    rows: Iterable[dict[str, Any]], path: str, metric: str = 'accuracy', train_resolution=None, title: str = ''
) -> str:
    """Metric against resolution, one line per (encoding, strategy), resolutions as categories (report.draw_lines);
    ``title`` (report.describe of the results) says what model it is. Saved as PNG."""
    table = results_pivot(rows, ordered=True)
    train = None if train_resolution is None else resolution_label(train_resolution)
    return report.plot_lines(
        table,
        path,
        title=title,
        xlabel='test resolution (H x W; dotted: training)',
        ylabel=f'{metric} (%)',
        label=line_label,
        train_column=train,
    )


save_figure = report.save_figure
