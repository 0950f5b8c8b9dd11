"""Evaluate one checkpoint at several resolutions (and resolution strategies), as data and as a plot.

The JSON schema written by ``vispe eval-resolution`` (cell by cell, through ``vispe.sweeps.engine``,
which adds ``failed``, ``complete`` and the identity fields it documents)::

    {"config": ..., "checkpoint": ..., "train_resolution": ..., "metric": "accuracy",
     "results": [{"encoding": ..., "strategy": ..., "resolution": ..., "value": ...}, ...]}
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch

from vispe.datasets.augment import check_resize
from vispe.evaluation import report
from vispe.evaluation.trained_model import (
    Resolution,
    check_resolutions,
    check_strategies,
    default_resolutions,
    encoding_label,
    load_model,
    model_patch_size,
    resolution_label,
    trained_config,
    training_record,
)
from vispe.registry import DATASETS
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import SettingsEvaluator


class OpenedClassifier(NamedTuple):
    """A classifier checkpoint ready for a sweep on its test set: the model, its encoding label, the evaluator of
    test-set settings, the resize setting (``resize_setting``) and results.json's header (config, checkpoint,
    ``training_record``, resize, metric)."""

    model: torch.nn.Module
    label: str
    settings: SettingsEvaluator
    resizing: dict[str, str]
    header: dict[str, Any]


def open_classifier(
    cfg, checkpoint: str, device: str | None, metric_key: str = 'accuracy/top1', resize: str | None = None
) -> OpenedClassifier:
    """Load ``checkpoint`` on ``device`` (default: cuda when available) for the resolution sweep and the sweeps that
    evaluate a classifier as it does (vispe.sweeps.patch_shift): the same model, loaders and header."""
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


def resize_setting(cfg, resize: str | None) -> dict[str, str]:
    """``{'resize': mode}`` for a test set that resizes image files (its class takes ``resize``; default 'crop'),
    {} for one that draws each size itself (Shapes2D); a ValueError when ``resize`` is asked of the latter."""
    dataset = cfg.test_dataloader.dataset
    kind = dataset.get('type')
    cls = DATASETS.get(kind) if isinstance(kind, str) else kind
    if cls is None or 'resize' not in inspect.signature(cls).parameters:
        if resize is not None:
            raise ValueError(
                f'--resize {resize}: the test set ({getattr(cls, "__name__", kind)}) renders each size itself, with '
                'no image to resize; leave --resize out'
            )
        return {}
    return {'resize': check_resize(resize or dataset.get('resize', 'crop'))}


def resolution_column(row: report.Row) -> str:
    """A row's resolution as a table column / figure tick: '32', or '32x48' (height x width)."""
    return resolution_label(row['resolution'])


def merged_column(row: report.Row) -> str:
    """A row's column in compare-results' merged table: its resolution's label, a square as one side."""
    return resolution_label(row['resolution'], collapse_square=True)


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
    table = results_pivot([*rows, *(dict(f, value=report.FAILED) for f in failed)])
    return report.rich_table(table, ['encoding', 'strategy'], title or f'{metric} by test resolution', fmt)


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


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: ``plot_results`` of its rows, the training resolution dotted, described in the title."""
    return plot_results(
        results['results'], path, train_resolution=results['train_resolution'], title=report.describe(results)
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
    """Evaluate ``checkpoint`` at each resolution and strategy, one cell each; returns the results dict (schema
    above). ``resize``: how a test set of image files brings an image to a size of another aspect ratio ('crop',
    the default: cover and cut the centre out; 'pad'; 'stretch'; ``vispe.datasets.augment.RESIZE_MODES``), recorded
    in the results; a procedural test set draws each size itself and takes none. With ``out_dir``,
    ``out_dir/results.json`` is written as each cell finishes and a rerun reuses the finished cells (``force``:
    recompute them; vispe.sweeps.engine). ``resolutions`` None: ``default_resolutions`` of the
    training size and the model's patch (0.5x, 0.75x, 1x, 1.5x, 2x, 3x, then 2:1 and 1:2 at the training token
    count), the rows' ``resolution`` then holding the pixel sizes (an int, or [H, W] for non-square)."""
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
