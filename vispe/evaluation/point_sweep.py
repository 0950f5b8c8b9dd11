"""Evaluate a point-cloud checkpoint at unseen point counts and object scales, as data and as a plot.

The test data set of the config is rebuilt with ``num_points`` = each count (at scale 1) and with ``scale`` = each
factor (at the training count). The JSON schema written by ``tools/eval_points.py``::

    {"config": ..., "checkpoint": ..., "train_points": 512, "metric": "accuracy",
     "results": [{"encoding": ..., "sweep": "points" | "scale", "setting": 1024, "factor": 2.0, "value": ...}, ...]}

``setting`` is the point count or the scale, ``factor`` the same relative to training (points / train_points, or
the scale itself: training is at scale 1).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from vispe.evaluation.resolution import save_figure
from vispe.evaluation.settings_sweep import evaluate_settings
from vispe.evaluation.tables import by_encoding, markdown

SWEEPS = ('points', 'scale')


def train_points(cfg) -> int:
    """The config's training point count: ``train_points`` or the training data set's num_points."""
    count = cfg.get('train_points') or cfg.train_dataloader.dataset.get('num_points')
    if count is None:
        raise ValueError('config has neither train_points nor train_dataloader.dataset.num_points')
    return int(count)


def default_settings(cfg) -> Dict[str, List[float]]:
    """``point_eval`` of the config (points, scales), else 1x / 2x / 4x the training count and scales 1 / 1.5 / 2."""
    n = train_points(cfg)
    opts = cfg.get('point_eval') or {}
    return {'points': list(opts.get('points', [n, 2 * n, 4 * n])), 'scales': list(opts.get('scales', [1.0, 1.5, 2.0]))}


def sweep(
    cfg,
    checkpoint: str,
    points: Optional[Sequence[int]] = None,
    scales: Optional[Sequence[float]] = None,
    device: Optional[str] = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
) -> Dict[str, Any]:
    """Evaluate ``checkpoint`` at each point count (scale 1) and each scale (training count); returns the results
    dict (schema above). The training setting is evaluated once and reported in both sweeps."""
    defaults = default_settings(cfg)
    points = [int(p) for p in (points or defaults['points'])]
    scales = [float(s) for s in (scales or defaults['scales'])]
    if min(points) < 1 or min(scales) <= 0:
        raise ValueError(f'point counts must be >= 1 and scales > 0, got points={points} scales={scales}')
    n_train = train_points(cfg)
    settings = [('points', p, p / n_train, (p, 1.0)) for p in points] + [('scale', s, s, (n_train, s)) for s in scales]
    name = lambda n, s: f'{n} points, scale {s:g}'  # noqa: E731
    conditions = {name(n, s): {'num_points': int(n), 'scale': float(s)} for *_, (n, s) in settings}  # dict: once each
    label, metrics = evaluate_settings(cfg, checkpoint, conditions, device, show_progress)
    rows = [
        {
            'encoding': label,
            'sweep': sweep,
            'setting': setting,
            'factor': factor,
            'value': metrics[name(n, s)][metric_key],
        }
        for sweep, setting, factor, (n, s) in settings
    ]
    return {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'train_points': n_train,
        'metric': metric_key.split('/')[0],
        'results': rows,
    }


def factor_label(row: Dict[str, Any]) -> str:
    """'2x points' / '1.5x scale'."""
    return f'{row["factor"]:g}x {row["sweep"]}'


def columns(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """Column labels in sweep order (points first), then by factor."""
    ordered = sorted(rows, key=lambda r: (SWEEPS.index(r['sweep']), r['factor']))
    return list(dict.fromkeys(factor_label(r) for r in ordered))


def results_table(rows: Sequence[Dict[str, Any]], title: str = '', fmt: str = '.1f'):
    """A rich Table: one row per encoding, one column per (sweep, factor)."""
    from rich.table import Table

    cols = columns(rows)
    table = Table(title=title or 'accuracy (%) by test point count and object scale')
    table.add_column('encoding')
    for c in cols:
        table.add_column(c, justify='right')
    for enc, cells in by_encoding(rows, factor_label).items():
        table.add_row(enc, *[format(cells[c], fmt) if c in cells else '-' for c in cols])
    return table


def markdown_table(rows: Sequence[Dict[str, Any]], fmt: str = '.1f') -> str:
    """The same table in markdown."""
    return markdown(by_encoding(rows, factor_label), columns(rows), fmt)


def plot_results(rows: Sequence[Dict[str, Any]], path: str, metric: str = 'accuracy') -> str:
    """Two panels, metric against the point-count factor and against the scale, one line per encoding."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=120, sharey=True)
    for ax, sweep, xlabel in zip(axes, SWEEPS, ('test points / training points', 'object scale (training: 1)')):
        series: Dict[str, List[Dict[str, Any]]] = {}
        for r in rows:
            if r['sweep'] == sweep:
                series.setdefault(r['encoding'], []).append(r)
        for enc, cells in series.items():
            cells = sorted(cells, key=lambda r: r['factor'])
            ax.plot([r['factor'] for r in cells], [r['value'] for r in cells], marker='o', label=enc)
        ax.axvline(1.0, color='grey', linestyle=':')
        if sweep == 'points':
            ax.set_xscale('log', base=2)
        factors = sorted({r['factor'] for r in rows if r['sweep'] == sweep})
        ax.set_xticks(factors, [f'{f:g}x' for f in factors])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f'{metric} (%)')
    axes[1].legend(fontsize=8)
    return save_figure(fig, path)


__all__ = ['default_settings', 'markdown_table', 'plot_results', 'results_table', 'sweep', 'train_points']
