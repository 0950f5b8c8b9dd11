"""Evaluate a video checkpoint at unseen frame counts (at the training size) and sizes (at the training count).

``time`` says how positions count time: ``tubelets`` (default: one step per tubelet; the strategies handle a longer
range) or ``clip`` (``Positions.spacing`` = T_train / T: more frames sit at smaller steps over the training span).
``vispe eval-video`` writes::

    {"config": ..., "checkpoint": ..., "train_frames": 8, "train_resolution": 32, "time": "tubelets",
     "metric": "accuracy", "results": [{"encoding": ..., "strategy": ..., "sweep": "frames" | "size",
     "setting": 16, "factor": 2.0, "value": ...}, ...]}

Each (strategy, sweep, setting) is one engine cell; the training setting runs once per strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import (
    check_strategies,
    encoding_label,
    load_model,
    trained_config,
    training_setting,
)
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import InputView, SettingsEvaluator

#: the two halves of the sweep, in the order tables and figures show them
PARTS = ('frames', 'size')
#: how the positions count time (module doc)
TIME_MODES = ('tubelets', 'clip')
#: the default settings, as multiples of the training frame count and of the training frame size
FRAME_FACTORS = (0.5, 1, 2, 4)
SIZE_FACTORS = (0.5, 0.75, 1, 1.5, 2)


def train_frames(cfg, meta: dict | None = None) -> int:
    """The frame count the model was trained on: checkpoint meta, else the training data set's, else the config's
    ``train_frames``."""
    return int(training_setting(cfg, meta, 'train_frames', 'frame count'))


def train_size(cfg, meta: dict | None = None) -> int:
    """The (square) frame size the model was trained on, as ``train_frames`` finds it."""
    size = training_setting(cfg, meta, 'train_resolution', 'frame size')
    if not isinstance(size, int):
        raise ValueError(f'the video sweep scales square frames; this run trained on {size}')
    return size


def default_settings(frames: int, size: int, tubelet: int, patch: int) -> dict[str, list[int]]:
    """Frame counts T/2 to 4T and sizes 0.5x to 2x, rounded to the tubelet and patch, duplicates dropped."""

    def rounded(value: float, step: int) -> int:
        return max(step, round(value / step) * step)

    counts = [rounded(frames * f, tubelet) for f in FRAME_FACTORS]
    sizes = [rounded(size * f, patch) for f in SIZE_FACTORS]
    return {'frames': list(dict.fromkeys(counts)), 'sizes': list(dict.fromkeys(sizes))}


def factor_label(row: report.Row) -> str:
    """'2x frames' / '1.5x size'."""
    return f'{row["factor"]:g}x {row["sweep"]}'


def factor_order(label: str) -> tuple[int, float]:
    """Sort key of a ``factor_label``: frame counts before sizes, then by factor."""
    factor, sweep = label.split(' ', 1)
    return (PARTS.index(sweep) if sweep in PARTS else len(PARTS)), float(factor.rstrip('x'))


def results_pivot(rows: Sequence[dict[str, Any]]) -> report.Pivot:
    """One line per (encoding, strategy), one column per (sweep, factor), frame counts first."""
    ordered = sorted(rows, key=lambda r: (PARTS.index(r['sweep']), r['factor']))
    columns = list(dict.fromkeys(factor_label(r) for r in ordered))
    return report.pivot(rows, ('encoding', 'strategy'), factor_label, columns=columns)


def results_table(
    rows: Sequence[dict[str, Any]], title: str = '', fmt: str = '.1f', failed: Sequence[dict[str, Any]] = ()
):
    """A rich Table: one row per (encoding, strategy), one column per (sweep, factor) ('failed' for failed cells)."""
    table = results_pivot([*rows, *(dict(f, value=report.FAILED) for f in failed)])
    return report.rich_table(
        table, ['encoding', 'strategy'], title or 'accuracy (%) by test frame count and frame size', fmt
    )


def markdown_table(rows: Sequence[dict[str, Any]], fmt: str = '.1f') -> str:
    """The same table in markdown."""
    return report.markdown(results_pivot(rows), fmt, align=':')


def line_label(key: tuple[str, ...]) -> str:
    """A legend entry: the encoding, with its strategy unless that is 'default' (encodings without any)."""
    return key[0] if key[1] == 'default' else f'{key[0]} ({key[1]})'


def plot_results(
    rows: Sequence[dict[str, Any]], path: str, metric: str = 'accuracy', title: str = '', chance: float | None = None
) -> str:
    """Two panels, metric against the frame-count and frame-size factors, one line per (encoding, strategy);
    ``chance`` dashed."""
    fig, axes = figures.plt().subplots(1, 2, figsize=(10, 4), dpi=120, sharey=True)
    for ax, sweep, xlabel in zip(axes, PARTS, ('test frames / training frames', 'test frame size / training size')):
        chosen = [r for r in rows if r['sweep'] == sweep]
        factors = sorted({r['factor'] for r in chosen})
        table = report.pivot(
            chosen, ('encoding', 'strategy'), lambda r: f'{r["factor"]:g}x', columns=[f'{f:g}x' for f in factors]
        )
        figures.draw_lines(ax, table, line_label, train_column='1x', train_label='training', chance=chance)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(f'{metric} (%)')
    figures.legend_outside(axes[1])
    if title:
        fig.suptitle(title, fontsize=9)
    return figures.save_figure(fig, path)


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: ``plot_results`` of its rows, described in the title."""
    chance = figures.chance_level(results, results.get('metric', 'accuracy'))
    return plot_results(results['results'], path, title=report.describe(results), chance=chance)


def _backbone(model: torch.nn.Module) -> Any:
    backbone = getattr(model, 'backbone', model)
    if not hasattr(backbone, 'tubelet_size'):
        raise ValueError(
            f'the video sweep evaluates a video backbone (VideoTransformer); this model is {type(backbone).__name__}: '
            'use vispe eval-resolution for images, vispe eval-points for point clouds'
        )
    return backbone


@SWEEPS.register(
    'video',
    plot=plot,
    fields=('encoding', 'strategy'),
    column=factor_label,
    order=factor_order,
    xlabel='test frames / frame size (relative to training)',
    command='eval-video',
    about='evaluate a video checkpoint at unseen frame counts and frame sizes',
    main='vispe.cli.eval_video',
)
def sweep(
    cfg,
    checkpoint: str,
    frames: Sequence[int] | None = None,
    sizes: Sequence[int] | None = None,
    strategies: Sequence[str] | None = None,
    device: str | None = None,
    time: str = 'tubelets',
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` at each frame count and frame size under each strategy; returns the results dict
    (``run_sweep`` into ``out_dir``)."""
    if time not in TIME_MODES:
        raise ValueError(f'time must be one of {TIME_MODES} (how the positions count time), got {time!r}')
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = load_model(cfg, checkpoint, device)
    backbone = _backbone(model)
    n_frames, size = train_frames(cfg, meta), train_size(cfg, meta)
    defaults = default_settings(n_frames, size, backbone.tubelet_size, backbone.patch_size)
    frames = [int(f) for f in (frames or defaults['frames'])]
    sizes = [int(s) for s in (sizes or defaults['sizes'])]
    for f in frames:
        backbone.check_clip_size(f, size, size, f'--frames {f}')
    for s in sizes:
        backbone.check_clip_size(n_frames, s, s, f'--sizes {s}')
    strategies = check_strategies(model, strategies)
    label, settings = encoding_label(model, meta), SettingsEvaluator(cfg, model)

    def cell(strategy: str, kind: str, setting: int, factor: float, count: int, pixels: int) -> Cell:
        key = {'encoding': label, 'strategy': strategy, 'sweep': kind, 'setting': setting, 'factor': factor}
        spacing = n_frames / count if time == 'clip' else 1.0

        def run(batch_size: int) -> list[dict[str, Any]]:
            backbone.time_spacing = spacing
            try:  # the spacing names the view, so two spacings of one setting are two evaluations
                view = InputView(f'time_spacing={spacing:g}', lambda x: x)
                metrics = settings.metrics({'num_frames': count, 'image_size': pixels}, batch_size, strategy, view)
            finally:
                backbone.time_spacing = 1.0
            return [dict(key, value=metrics[metric_key])]

        return Cell(f'{strategy} @ {kind} {setting:g}', key, run, settings.batch_size)

    cells = [
        *(cell(s, 'frames', f, f / n_frames, f, size) for s in strategies for f in frames),
        *(cell(s, 'size', p, p / size, n_frames, p) for s in strategies for p in sizes),
    ]
    header = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'train_frames': n_frames,
        'train_resolution': size,
        'time': time,
        'metric': metric_key.split('/')[0],
        **trained_config(meta),
    }
    identity = sweep_identity('video', cfg, checkpoint, metric_key=metric_key, time=time)
    return run_sweep(cells, header, identity, out_dir, force, show_progress, log)


#: a video checkpoint at several frame counts x frame sizes into ``out_dir``, then its plot there
evaluate_video = SWEEPS['video'].evaluate

__all__ = [
    'TIME_MODES',
    'default_settings',
    'evaluate_video',
    'markdown_table',
    'plot_results',
    'results_table',
    'sweep',
    'train_frames',
]
