"""The video block of the leaderboard: every video encoding x task x seed trained on ShapesVideo with one schedule,
each run swept over frame counts and frame sizes with every strategy (``vispe.sweeps.video``), reported per
(task, encoding) with its plain strategy and its best one, as mean and spread over seeds.

Runs live in ``out/<task>/<encoding>/seed<k>`` (a finished run is reused, an interrupted one resumes); each run's
sweep in its ``eval`` folder. With an archive (``VideoArchive``; the checkout's is ``results/leaderboard_video``)
each finished run's results are kept there too, and a run found there is read instead of trained: the board grows
seed by seed across machines. The tables' columns are the sweep's factors, the training setting first ('1x frames',
which is also the training size), then T/2, 2T, 4T frames and 0.5x to 2x the frame size; an encoding's best
strategy is the one with the highest mean over the columns other than the training one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from vispe.datasets.shapes_video import TASKS
from vispe.evaluation import figures
from vispe.experiments.compare import Run, encoding_option, schedule_options, supported_strategies, train_and_sweep
from vispe.sweeps.video import FRAME_FACTORS, SIZE_FACTORS, evaluate_video, factor_label, factor_order
from workbench.leaderboard_report import Stats, markdown, strategy_pivot, summarize
from workbench.leaderboard_runs import Archive, collect, run_folder

#: the config every run starts from (its task and encoding set by cfg-options)
CONFIG = 'video/video_tiny_rope_axial_shapes_video.py'
#: the encodings the block ranks by default: the absolute baselines, the 3D forms of the image rotary encodings,
#: the video rotary encodings, and a run without any encoding
DEFAULT_ENCODINGS = ('none', 'ape_learned', 'ape_sincos', 'rope_axial', 'rope_mixed', 'mrope', 'videorope', 'vrope')
#: the training column: T frames of the training size
TRAIN_COLUMN = '1x frames'
#: the columns of a run swept at the defaults (the training size's own row is the training column's)
DEFAULT_COLUMNS = frozenset(
    [f'{f:g}x frames' for f in FRAME_FACTORS] + [f'{f:g}x size' for f in SIZE_FACTORS if f != 1]
)


def task_options(task: str) -> list[str]:
    """The cfg-options that set ShapesVideo's ``task`` in every loader and the head's classes to match."""
    if task not in TASKS:
        raise ValueError(f'unknown ShapesVideo task {task!r}; choose one of {sorted(TASKS)}')
    classes = len(TASKS[task][1])
    loaders = ('train_dataloader', 'val_dataloader', 'test_dataloader')
    return [*(f'{loader}.dataset.task={task}' for loader in loaders), f'model.backbone.num_classes={classes}']


def board_runs(
    tasks: Sequence[str], encodings: Sequence[str], seeds: Sequence[int], out: str, epochs: int | None = None
) -> list[Run]:
    """One run per (task, encoding, seed) in ``out/<task>/<encoding>/seed<k>``; ``epochs`` overrides the config's."""
    schedule = schedule_options(epochs)
    return [
        Run(
            task,
            CONFIG,
            os.path.join(out, task, run_folder(enc), f'seed{seed}'),
            [encoding_option(enc), *task_options(task), f'randomness.seed={seed}', *schedule],
            encoding=enc,
            seed=seed,
        )
        for task in tasks
        for enc in encodings
        for seed in seeds
    ]


def columns_of(labels: Sequence[str]) -> list[str]:
    """The table columns of these factor labels: the training one, then the others in sweep order (frames, then
    sizes)."""
    return [TRAIN_COLUMN, *sorted(set(labels) - {TRAIN_COLUMN, '1x size'}, key=factor_order)]


def train_and_sweep_video(run: Run, resolutions: Sequence[str], log: Callable[[str], None] = print) -> dict:
    """``collect``'s work for one run: train it (or reuse / resume it), sweep it at the defaults (``eval-video``:
    T/2 to 4T frames, 0.5x to 2x the size, every strategy), and return its results with each row's column as its
    ``resolution`` (the training size's own row is the training column's, so it is dropped)."""
    return labelled(train_and_sweep(run, evaluate_video, log))


def labelled(results: dict) -> dict:
    """A video sweep's results with each row's column as its ``resolution``, the training size's own row dropped
    (it is the training column's); results already labelled come back the same."""
    rows = [
        dict(row, resolution=factor_label(row))
        for row in results['results']
        if not (row['sweep'] == 'size' and row['factor'] == 1.0)
    ]
    return dict(results, results=rows)


class VideoArchive(Archive):
    """The video board's archive (``leaderboard.Archive``: ``root/<task>/<encoding>/seed<k>/results.json`` and
    ``run.json``). It holds a run's sweep (a ``vispe eval-video`` results.json as it is, or one already labelled),
    which answers the run when it is complete, has the strategies of the run's model and the default columns."""

    def load(self, run: Run, resolutions: Sequence[str]) -> dict | None:
        results = super().load(run, resolutions)
        return None if results is None else labelled(results)

    def covers(self, run: Run, results: dict, resolutions: Sequence[str]) -> bool:
        rows = labelled(results)['results']
        return (
            results.get('complete', True)
            and {row['resolution'] for row in rows} == DEFAULT_COLUMNS
            and {row['strategy'] for row in rows} == set(supported_strategies(run))
        )


def board(
    tasks: Sequence[str],
    encodings: Sequence[str],
    seeds: Sequence[int],
    out: str,
    epochs: int | None = None,
    jobs: int = 1,
    train: bool = True,
    log: Callable[[str], None] = print,
    archive: str | None = None,
) -> tuple[Stats, list[str]]:
    """Train and sweep every run (``jobs`` at a time; ``train=False`` reads the finished ones only), each found in
    the ``archive`` folder read from it and each finished one kept there; returns the statistics per (task,
    encoding, strategy, column) and the columns."""
    runs = board_runs(tasks, encodings, seeds, out, epochs)
    store = VideoArchive(archive, out) if archive else None
    values = collect(runs, [], log, archive=store, jobs=jobs, work=train_and_sweep_video, train=train)
    if not values:
        where = f'{out} or {archive}' if archive else out
        raise ValueError(f'no finished runs in {where}: train them first (leave out --no-train)')
    stats = summarize(values)
    return stats, columns_of([column for (_, _, _, column) in stats])


def board_markdown(stats: Stats, tasks: Sequence[str], columns: Sequence[str]) -> str:
    """One table per task: each encoding with its plain strategy and, when another does better beyond the training
    setting, its best one; mean ± std over seeds."""
    parts = []
    for task in tasks:
        if any(t == task for (t, _, _, _) in stats):
            parts.append(f'### ShapesVideo {task}\n\n{markdown(stats, task, list(columns))}\n')
    return '\n'.join(parts)


def board_rows(stats: Stats) -> list[dict[str, Any]]:
    """The statistics as JSON rows: task, encoding, strategy, column, mean, std, seeds."""
    return [
        dict(task=t, encoding=e, strategy=s, column=c, mean=m, std=sd, seeds=n)
        for (t, e, s, c), (m, sd, n) in sorted(stats.items())
    ]


def plot(stats: Stats, tasks: Sequence[str], columns: Sequence[str], path: str) -> str:
    """Per task a row of four panels: frames and frame size, each with the encodings' plain and best strategies;
    accuracy against the factor (the training setting dotted), one line per encoding with its spread over seeds."""
    fig, axes = figures.plt().subplots(len(tasks), 4, figsize=(18, 4 * len(tasks)), dpi=100, squeeze=False)
    for row, task in enumerate(tasks):
        for col, (part, best) in enumerate((('frames', False), ('frames', True), ('size', False), ('size', True))):
            ax = axes[row][col]
            table = strategy_pivot(stats, task, list(columns), best=best)
            shown = [c for c in columns if c.endswith(part) or c == TRAIN_COLUMN]
            table.columns = sorted(shown, key=lambda c: float(c.split('x ')[0]))  # by factor, frames or size
            figures.draw_lines(ax, table, lambda key: f'{key[0]} ({key[1]})', TRAIN_COLUMN, train_label='training')
            ax.set_title(f'ShapesVideo {task}: {part}, {"best" if best else "plain"} strategy', fontsize=9)
            ax.set_xlabel('test frames / training frames' if part == 'frames' else 'test frame size / training')
            ax.set_ylabel('top-1 accuracy (%)')
            ax.legend(fontsize=6)
    return figures.save_figure(fig, path)


__all__ = [
    'CONFIG',
    'DEFAULT_COLUMNS',
    'DEFAULT_ENCODINGS',
    'TRAIN_COLUMN',
    'VideoArchive',
    'board',
    'board_markdown',
    'board_rows',
    'board_runs',
    'columns_of',
    'labelled',
    'plot',
    'task_options',
    'train_and_sweep_video',
]
