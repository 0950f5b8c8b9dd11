"""Evaluate a point-cloud checkpoint at unseen point counts (at scale 1) and object scales (at the training count).
``vispe eval-points`` writes::

    {"config": ..., "checkpoint": ..., "train_points": 512, "metric": "accuracy",
     "results": [{"encoding": ..., "sweep": "points" | "scale", "setting": 1024, "factor": 2.0, "value": ...}, ...]}

``factor`` is ``setting`` relative to training. Each (sweep, setting) is one engine cell; training's runs once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import encoding_label, load_model, trained_config, training_setting
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import SettingsEvaluator

#: the two halves of the sweep, in the order tables and figures show them
PARTS = ('points', 'scale')
PART_ORDER = {part: i for i, part in enumerate(PARTS)}


def train_points(cfg, meta: dict | None = None) -> int:
    """The point count the model was trained on: checkpoint meta, else the training data set's, else the config's
    ``train_points``."""
    return int(training_setting(cfg, meta, 'train_points', 'point count'))


def default_settings(cfg, meta: dict | None = None) -> dict[str, list[float]]:
    """``point_eval`` of the config (points, scales), else 1x / 2x / 4x the training count and scales 1 / 1.5 / 2."""
    n = train_points(cfg, meta)
    opts = cfg.get('point_eval') or {}
    return {'points': list(opts.get('points', [n, 2 * n, 4 * n])), 'scales': list(opts.get('scales', [1.0, 1.5, 2.0]))}


def factor_label(row: report.Row) -> str:
    """'2x points' / '1.5x scale'."""
    return f'{row["factor"]:g}x {row["sweep"]}'


def factor_order(label: str) -> tuple[int, float]:
    """Sort key of a ``factor_label``: point counts before scales, then by factor."""
    factor, sweep = label.split(' ', 1)
    return PART_ORDER.get(sweep, len(PART_ORDER)), float(factor.rstrip('x'))


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Column labels in sweep order (points first), then by factor."""
    ordered = sorted(rows, key=lambda r: (PARTS.index(r['sweep']), r['factor']))
    return list(dict.fromkeys(factor_label(r) for r in ordered))


def results_pivot(rows: Sequence[dict[str, Any]]) -> report.Pivot:
    """One line per encoding, one column per (sweep, factor) in ``columns`` order."""
    return report.pivot(rows, ('encoding',), factor_label, columns=columns(rows))


def results_table(
    rows: Sequence[dict[str, Any]], title: str = '', fmt: str = '.1f', failed: Sequence[dict[str, Any]] = ()
):
    """A rich Table: one row per encoding, one column per (sweep, factor) ('failed' for failed cells)."""
    table = results_pivot([*rows, *(dict(f, value=report.FAILED) for f in failed)])
    return report.rich_table(table, ['encoding'], title or 'accuracy (%) by test point count and object scale', fmt)


def markdown_table(rows: Sequence[dict[str, Any]], fmt: str = '.1f') -> str:
    """The same table in markdown."""
    return report.markdown(results_pivot(rows), fmt, align=':')


def plot_results(
    rows: Sequence[dict[str, Any]], path: str, metric: str = 'accuracy', title: str = '', chance: float | None = None
) -> str:
    """Two panels, metric against the point-count factor and against the scale, one line per encoding; ``chance``
    dashed."""
    fig, axes = figures.plt().subplots(1, 2, figsize=(9, 3.8), dpi=120, sharey=True)
    for ax, sweep, xlabel in zip(axes, PARTS, ('test points / training points', 'object scale (training: 1)')):
        chosen = [r for r in rows if r['sweep'] == sweep]
        factors = sorted({r['factor'] for r in chosen})
        table = report.pivot(chosen, ('encoding',), lambda r: f'{r["factor"]:g}x', columns=[f'{f:g}x' for f in factors])
        figures.draw_lines(ax, table, lambda key: key[0], train_column='1x', train_label='training', chance=chance)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(f'{metric} (%)')
    figures.legend_outside(axes[1], fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    return figures.save_figure(fig, path)


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: ``plot_results`` of its rows, described in the title."""
    chance = figures.chance_level(results, results.get('metric', 'accuracy'))
    return plot_results(results['results'], path, title=report.describe(results), chance=chance)


@SWEEPS.register(
    'points',
    plot=plot,
    fields=('encoding',),
    column=factor_label,
    order=factor_order,
    xlabel='test points / object scale (relative to training)',
    command='eval-points',
    about='evaluate a point-cloud checkpoint at unseen point counts and scales',
    main='vispe.cli.eval_points',
)
def sweep(
    cfg,
    checkpoint: str,
    points: Sequence[int] | None = None,
    scales: Sequence[float] | None = None,
    device: str | None = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` at each point count and scale; the results dict (``run_sweep`` into ``out_dir``)."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = load_model(cfg, checkpoint, device)
    defaults = default_settings(cfg, meta)
    points = [int(p) for p in (points or defaults['points'])]
    scales = [float(s) for s in (scales or defaults['scales'])]
    if min(points) < 1 or min(scales) <= 0:
        raise ValueError(f'point counts must be >= 1 and scales > 0, got points={points} scales={scales}')
    n_train = train_points(cfg, meta)
    label, settings = encoding_label(model, meta), SettingsEvaluator(cfg, model)

    def cell(kind: str, setting: float, factor: float, count: int, scale: float) -> Cell:
        key = {'encoding': label, 'sweep': kind, 'setting': setting, 'factor': factor}

        def run(batch_size: int) -> list[dict[str, Any]]:
            metrics = settings.metrics({'num_points': int(count), 'scale': float(scale)}, batch_size)
            return [dict(key, value=metrics[metric_key])]

        return Cell(f'{kind} {setting:g}', key, run, settings.batch_size)

    cells = [cell('points', p, p / n_train, p, 1.0) for p in points] + [cell('scale', s, s, n_train, s) for s in scales]
    header = {'config': cfg.filename, 'checkpoint': checkpoint, 'train_points': n_train, **trained_config(meta)}
    header['metric'] = metric_key.split('/')[0]
    identity = sweep_identity('points', cfg, checkpoint, metric_key=metric_key)
    return run_sweep(cells, header, identity, out_dir, force, show_progress, log)


#: a point-cloud checkpoint at several point counts x object scales into ``out_dir``, then its plot there
evaluate_points = SWEEPS['points'].evaluate

__all__ = [
    'default_settings',
    'evaluate_points',
    'markdown_table',
    'plot_results',
    'results_table',
    'sweep',
    'train_points',
]
