"""The sweeps as the evaluation commands run them: the sweep into ``out_dir`` (results.json, cell by cell), then
its plot ``out_dir/results.png``. ``vispe eval-resolution`` / ``eval-points`` / ``eval-cameras`` (tools/eval_*.py)
print their tables around these; compare, the leaderboard and the demos call them in process.

Each takes its sweep's arguments: ``evaluate_resolution(cfg, checkpoint, resolutions, strategies=None, device=None,
*, out_dir, show_progress=False, force=False, log=print)``, ``evaluate_points(cfg, checkpoint, points=None,
scales=None, device=None, *, ...)``, ``evaluate_cameras(cfg, checkpoint, settings=None, device=None, *, ...)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vispe.evaluation import camera_sweep as C
from vispe.evaluation import outputs
from vispe.evaluation import point_sweep as P
from vispe.evaluation import resolution as R
from vispe.evaluation.report import describe
from vispe.evaluation.sweep_engine import Log

PLOT = 'results.png'

Results = dict[str, Any]


def sweep_and_plot(name: str, sweep: Callable[..., Results], plot: Callable[[Results, str], Any]):
    """``name``: ``sweep(cfg, checkpoint, *settings, out_dir=..., **options)`` then ``plot(results,
    out_dir/results.png)``."""

    def evaluate(
        cfg,
        checkpoint: str,
        *settings: Any,
        out_dir: str,
        show_progress: bool = False,
        force: bool = False,
        log: Log = print,
        **options: Any,
    ) -> Results:
        with outputs.forcing(force):
            outputs.check_target(os.path.join(out_dir, PLOT), 'figure')  # before any cell runs
            results = sweep(
                cfg, checkpoint, *settings, show_progress=show_progress, out_dir=out_dir, force=force, log=log,
                **options,
            )  # fmt: skip
            plot(results, os.path.join(out_dir, PLOT))
        return results

    evaluate.__name__ = evaluate.__qualname__ = name
    evaluate.__doc__ = f'{sweep.__module__}.sweep into ``out_dir``, then its plot {PLOT} there.'
    return evaluate


#: a classifier checkpoint at several resolutions, plotted against the training resolution
evaluate_resolution = sweep_and_plot(
    'evaluate_resolution',
    R.sweep,
    lambda r, path: R.plot_results(r['results'], path, train_resolution=r['train_resolution'], title=describe(r)),
)
#: a point-cloud checkpoint at several point counts x object scales
evaluate_points = sweep_and_plot(
    'evaluate_points', P.sweep, lambda r, path: P.plot_results(r['results'], path, title=describe(r))
)
#: a multi-view checkpoint at the config's camera settings
evaluate_cameras = sweep_and_plot(
    'evaluate_cameras', C.sweep, lambda r, path: C.plot_results(r['results'], path, title=describe(r))
)

__all__ = ['PLOT', 'evaluate_cameras', 'evaluate_points', 'evaluate_resolution', 'sweep_and_plot']
