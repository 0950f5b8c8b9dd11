"""Evaluate one checkpoint at several resolutions and resolution strategies. ``vispe eval-resolution`` writes::

    {"config": ..., "checkpoint": ..., "train_resolution": ..., "metric": "accuracy",
     "results": [{"encoding": ..., "strategy": ..., "resolution": ..., "value": ...}, ...]}

Each (strategy, resolution) is one ``vispe.sweeps.engine`` cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch

from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import (
    Resolution,
    check_resolutions,
    check_strategies,
    default_resolutions,
    encoding_label,
    load_model,
    model_patch_size,
    resize_setting,
    resolution_label,
    trained_config,
    training_record,
)
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import SettingsEvaluator


class OpenedClassifier(NamedTuple):
    """A classifier checkpoint ready for a sweep on its test set: model, encoding label, evaluator, resize setting and
    results header."""

    model: torch.nn.Module
    label: str
    settings: SettingsEvaluator
    resizing: dict[str, str]
    header: dict[str, Any]


def open_classifier(
    cfg, checkpoint: str, device: str | None, metric_key: str = 'accuracy/top1', resize: str | None = None
) -> OpenedClassifier:
    """Load ``checkpoint`` on ``device`` (default: cuda when available) for the sweeps that evaluate a classifier."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = load_model(cfg, checkpoint, device)
    record = training_record(cfg, meta)  # a run on several sizes has no one training resolution
    resizing = resize_setting(cfg, resize)
    header = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        **record,
        **resizing,
        'metric': metric_key.split('/')[0],
        **trained_config(meta),
    }
    return OpenedClassifier(model, encoding_label(model, meta), SettingsEvaluator(cfg, model), resizing, header)


def resolution_column(row: report.Row) -> str:
    """A row's resolution as a table column / figure tick: '32', or '32x48' (height x width)."""
    return resolution_label(row['resolution'])


def merged_column(row: report.Row) -> str:
    """A row's column in compare-results' merged table: its resolution's label, a square as one side."""
    return resolution_label(row['resolution'], collapse_square=True)


def results_pivot(rows: Iterable[dict[str, Any]], ordered: bool = False) -> report.Pivot:
    """One line per (encoding, strategy), one column per resolution, as they appear or (``ordered``) by pixel count."""
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
    """A rich Table: one row per (encoding, strategy), one column per resolution ('failed' for failed cells)."""
    table = results_pivot([*rows, *(dict(f, value=report.FAILED) for f in failed)])
    return report.rich_table(table, ['encoding', 'strategy'], title or f'{metric} by test resolution', fmt)


def line_label(key: tuple[str, str]) -> str:
    """A figure's legend entry: the encoding, with its strategy unless that is 'default' (encodings without any)."""
    enc, strat = key
    return enc if strat == 'default' else f'{enc} ({strat})'


def plot_results(
    rows: Iterable[dict[str, Any]],
    path: str,
    metric: str = 'accuracy',
    train_resolution=None,
    title: str = '',
    chance: float | None = None,
) -> str:
    """Metric against resolution (categorical), one line per (encoding, strategy), ``chance`` dashed; saved as PNG."""
    table = results_pivot(rows, ordered=True)
    train = None if train_resolution is None else resolution_label(train_resolution)
    return figures.plot_lines(
        table,
        path,
        title=title,
        xlabel='test resolution (H x W; dotted: training)',
        ylabel=f'{metric} (%)',
        label=line_label,
        train_column=train,
        chance=chance,
    )


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: ``plot_results`` of its rows, the training resolution dotted, described in the title."""
    return plot_results(
        results['results'],
        path,
        train_resolution=results['train_resolution'],
        title=report.describe(results),
        chance=figures.chance_level(results, results.get('metric', 'accuracy')),
    )


@SWEEPS.register(
    'resolution',
    plot=plot,
    fields=('encoding', 'strategy'),
    column=merged_column,
    order=report.resolution_order,
    xlabel='test resolution (H x W)',
    command='eval-resolution',
    about='evaluate a checkpoint at unseen resolutions (tools/eval_resolution.py)',
    main='vispe.cli.eval_resolution',
)
def sweep(
    cfg,
    checkpoint: str,
    resolutions: Sequence[Resolution] | None = None,
    strategies: Sequence[str] | None = None,
    device: str | None = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
    resize: str | None = None,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` at each resolution (None: ``default_resolutions`` of the training size and patch) and
    strategy, one cell each; returns the results dict (``run_sweep`` into ``out_dir``). ``resize``: how a test set of
    image files meets another aspect ratio ('crop', 'pad', 'stretch'); a procedural one takes none."""
    opened = open_classifier(cfg, checkpoint, device, metric_key, resize)
    model, settings, train = opened.model, opened.settings, opened.header['train_resolution']
    strategies = check_strategies(model, strategies)
    if resolutions is None:
        if train is None:
            raise ValueError(
                f'the checkpoint was trained on sizes {opened.header["train_sizes"]}, not at one resolution to scale '
                'the default test resolutions from: pass --resolutions'
            )
        resolutions = default_resolutions(train, model_patch_size(model))
    check_resolutions(model, resolutions)
    label, resizing = opened.label, opened.resizing

    def cell(strategy: str, res: Resolution) -> Cell:
        key = {'encoding': label, 'strategy': strategy, 'resolution': res}

        def run(batch_size: int) -> list[dict[str, Any]]:
            metrics = settings.metrics({'image_size': res, **resizing}, batch_size, strategy)
            return [dict(key, value=metrics[metric_key])]

        return Cell(f'{strategy} @ {resolution_label(res)}', key, run, settings.batch_size)

    cells = [cell(s, r) for s in strategies for r in resolutions]
    identity = sweep_identity('resolution', cfg, checkpoint, metric_key=metric_key, **resizing)
    return run_sweep(cells, opened.header, identity, out_dir, force, show_progress, log)


#: a classifier checkpoint at several resolutions into ``out_dir``, then its plot there
evaluate_resolution = SWEEPS['resolution'].evaluate
