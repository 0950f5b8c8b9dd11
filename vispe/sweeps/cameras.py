"""Evaluate a multi-view checkpoint at camera settings it never saw (the config's ``camera_eval.settings``: overrides of
the test set's ``MultiViewScenes`` arguments). ``vispe eval-cameras`` writes::

    {"config": ..., "checkpoint": ..., "metric": "loc3d", "threshold": 0.2,
     "results": [{"encoding": ..., "setting": "fov_wide", "overrides": {...}, "mean_error": ..., "value": ...}]}

``value``: percent of scenes whose target is found within the threshold; ``mean_error``: mean 3D distance. Each setting
is one cell of ``vispe.sweeps.engine``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import encoding_label, load_model, trained_config
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import SettingsEvaluator


def camera_settings(cfg, names: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The config's named settings, all or those ``names``; ValueError listing the known ones for others."""
    known = dict((cfg.get('camera_eval') or {}).get('settings') or {'train': {}})
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f'unknown camera settings {unknown}; the config defines {list(known)}')
        known = {n: known[n] for n in names}
    return {name: dict(overrides) for name, overrides in known.items()}


def setting(row: report.Row) -> str:
    """A row's column: its setting's name."""
    return str(row['setting'])


def _settings(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r['setting'] for r in rows))


def results_pivot(rows: Sequence[dict[str, Any]], key: str = 'value', columns: Sequence[str] | None = None):
    """One line per encoding, one column per setting (in the order they first appear), values of ``key``."""
    return report.pivot(rows, ('encoding',), setting, key, columns=columns or _settings(rows))


def results_table(rows: Sequence[dict[str, Any]], title: str = '', failed: Sequence[dict[str, Any]] = ()):
    """A rich Table: one row per encoding, one column per setting, 'mean error / within %' (or 'failed')."""
    from rich.table import Table

    cols = _settings([*rows, *failed])
    errors, within = results_pivot(rows, 'mean_error', cols), results_pivot(rows, 'value', cols)
    failures = results_pivot([dict(f, value=report.FAILED) for f in failed], columns=cols)
    table = Table(title=title or '3D error (data units) / within threshold (%) by camera setting')
    table.add_column('encoding')
    for c in cols:
        table.add_column(c, justify='right')
    for enc in dict.fromkeys([*errors.keys, *failures.keys]):
        texts = [
            f'{errors.stat(enc, c).mean:.3f} / {within.stat(enc, c).mean:.0f}'
            if errors.get(enc, c) is not None
            else report.cell_text(failures.get(enc, c), '')
            for c in cols
        ]
        table.add_row(*enc, *texts)
    return table


def markdown_table(rows: Sequence[dict[str, Any]], key: str = 'mean_error', fmt: str = '.3f') -> str:
    """One line per encoding, one column per setting, values of ``key`` ('mean_error' or 'value')."""
    return report.markdown(results_pivot(rows, key), fmt, align=':')


def plot_results(rows: Sequence[dict[str, Any]], path: str, title: str = '') -> str:
    """Grouped bars of the mean 3D error per setting, one colour and hatch per encoding."""
    import numpy as np

    cols = _settings(rows)
    errors = results_pivot(rows, 'mean_error')
    fig, ax = figures.plt().subplots(figsize=(max(6.0, 1.3 * len(cols) + 1), 3.8), dpi=120)
    width = 0.8 / max(1, len(errors.keys))
    x = np.arange(len(cols))
    for i, key in enumerate(errors.keys):
        heights = [errors.stat(key, c).mean for c in cols]
        shift = (i - (len(errors.keys) - 1) / 2) * width
        ax.bar(x + shift, heights, width, label=key[0], hatch=HATCHES[i % len(HATCHES)], edgecolor='white')
    ax.set_xticks(x, cols, rotation=20)
    ax.set_ylabel('mean 3D error (data units)')
    ax.grid(axis='y', alpha=0.3)
    figures.legend_outside(ax, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return figures.save_figure(fig, path)


HATCHES = ('', '//', '..', 'xx', '\\\\', '++')


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: ``plot_results`` of its rows, described in the title."""
    return plot_results(results['results'], path, title=report.describe(results))


@SWEEPS.register(
    'cameras',
    plot=plot,
    fields=('encoding',),
    column=setting,
    xlabel='camera setting',
    command='eval-cameras',
    about='evaluate a multi-view checkpoint at unseen camera settings',
    main='vispe.cli.eval_cameras',
)
def sweep(
    cfg,
    checkpoint: str,
    names: Sequence[str] | None = None,
    device: str | None = None,
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` under each named camera setting; the results dict (``run_sweep`` into ``out_dir``)."""
    settings = camera_settings(cfg, names)
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = load_model(cfg, checkpoint, device)
    label, evaluator = encoding_label(model, meta), SettingsEvaluator(cfg, model)

    def cell(name: str, overrides: dict[str, Any]) -> Cell:
        key = {'encoding': label, 'setting': name}

        def run(batch_size: int) -> list[dict[str, Any]]:
            metrics = evaluator.metrics(overrides, batch_size)
            row = dict(key, overrides=overrides, mean_error=metrics['loc3d/mean_error'])
            return [dict(row, value=metrics['loc3d/within'])]

        return Cell(name, key, run, evaluator.batch_size)

    header = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'metric': 'loc3d',
        'threshold': cfg.test_evaluator.get('threshold', 0.2),
        **trained_config(meta),
    }
    cells = [cell(name, overrides) for name, overrides in settings.items()]
    return run_sweep(cells, header, sweep_identity('cameras', cfg, checkpoint), out_dir, force, show_progress, log)


#: a multi-view checkpoint at the config's camera settings into ``out_dir``, then its plot there
evaluate_cameras = SWEEPS['cameras'].evaluate

__all__ = ['camera_settings', 'evaluate_cameras', 'markdown_table', 'plot_results', 'results_table', 'sweep']
