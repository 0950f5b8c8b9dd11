"""Robustness of a classifier to its input translated by a fraction of a patch (``vispe eval-patch-shift``): every test
image rolled (``torch.roll``: wrapping round, every pixel kept) by 0, 1/4, 1/2, 3/4 and 1 patch along x, y and
diagonally; meaningful only where the label does not move with the image (Shapes2D ``relation``). Schema::

    {"config": ..., "checkpoint": ..., "train_resolution": ..., "metric": "accuracy", "patch_size": [4, 4],
     "translation": "roll",
     "results": [{"encoding": ..., "direction": "x" | "y" | "xy", "shift": 0.25, "pixels": [0, 1], "value": ...}]}

``shift``: fraction of the patch; ``pixels``: the (down, right) roll in whole pixels.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from vispe.engine.config import common_parser_args, sweep_parser_args
from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import model_patch_size
from vispe.registry import DATASETS
from vispe.sweeps import engine
from vispe.sweeps.engine import Cell, Log, run_sweep
from vispe.sweeps.identity import sweep_identity
from vispe.sweeps.registry import SWEEPS, finish_sweep
from vispe.sweeps.resolution import open_classifier
from vispe.sweeps.settings import InputView

#: direction -> the (down, right) unit of a roll
DIRECTIONS = {'x': (0, 1), 'y': (1, 0), 'xy': (1, 1)}
#: fractions of a patch
DEFAULT_SHIFTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def roll_pixels(shift: float, direction: str, patch: Sequence[int]) -> tuple[int, int]:
    """The (down, right) roll in whole pixels of ``shift`` patches along ``direction``."""
    down, right = DIRECTIONS[direction]
    return down * round(shift * patch[0]), right * round(shift * patch[1])


def roll_view(pixels: tuple[int, int]) -> InputView:
    """Each image (..., H, W) rolled ``pixels`` = (down, right), wrapping round: the same size, the same pixels."""
    down, right = pixels
    return InputView(f'roll {down} {right}', lambda images: torch.roll(images, (down, right), dims=(-2, -1)))


def check_settings(shifts: Iterable[float], directions: Iterable[str]) -> tuple[list[float], list[str]]:
    """The shifts as floats and the directions; ValueError for a non-finite shift or unknown direction."""
    shifts, directions = [float(s) for s in shifts], list(directions)
    bad = [s for s in shifts if not math.isfinite(s)]
    if bad:
        raise ValueError(f'shifts must be finite fractions of a patch, got {bad}: pass e.g. --shifts 0 0.25 0.5')
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise ValueError(f'unknown directions {unknown}; choose from {list(DIRECTIONS)}')
    return shifts, directions


def shift_label(row: report.Row) -> str:
    """A row's column: its shift in patches, '0.25'."""
    return f'{row["shift"]:g}'


def results_pivot(rows: Iterable[dict[str, Any]], ordered: bool = False) -> report.Pivot:
    """One line per (encoding, direction), one column per shift: as they first appear, or (``ordered``) by shift."""
    return report.pivot(list(rows), ('encoding', 'direction'), shift_label, order=float if ordered else None)


def results_table(rows: Iterable[dict[str, Any]], title: str = '', failed: Iterable[dict[str, Any]] = ()):
    """A rich Table: one row per (encoding, direction), one column per shift ('failed' for failed cells)."""
    table = results_pivot([*rows, *(dict(f, value=report.FAILED) for f in failed)], ordered=True)
    return report.rich_table(table, ['encoding', 'direction'], title or 'accuracy (%) by shift (patches)', '.1f')


def plot(results: dict[str, Any], path: str) -> str:
    """Accuracy against the shift, one line per (encoding, direction); report.describe's title. Saved as PNG."""
    return figures.plot_lines(
        results_pivot(results['results'], ordered=True),
        path,
        title=report.describe(results),
        xlabel='shift (fraction of a patch; circular roll)',
        ylabel=f'{results.get("metric", "accuracy")} (%)',
        label=lambda key: f'{key[0]} ({key[1]})',
        chance=figures.chance_level(results, results.get('metric', 'accuracy')),
    )


@SWEEPS.register(
    'patch_shift',
    plot=plot,
    fields=('encoding', 'direction'),
    column=shift_label,
    order=float,
    xlabel='shift (fraction of a patch)',
    command='eval-patch-shift',
    about='evaluate a classifier checkpoint on inputs shifted by fractions of a patch',
    main='vispe.sweeps.patch_shift',
)
def sweep(
    cfg,
    checkpoint: str,
    shifts: Sequence[float] | None = None,
    directions: Sequence[str] | None = None,
    device: str | None = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
    out_dir: str | None = None,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` with every test image rolled by each shift along each direction, one cell each (shift 0
    once); returns the results dict (``run_sweep`` into ``out_dir``)."""
    shifts, directions = check_settings(shifts or DEFAULT_SHIFTS, directions or DIRECTIONS)
    opened = open_classifier(cfg, checkpoint, device, metric_key)
    patch = model_patch_size(opened.model)
    train = opened.header['train_resolution']  # None for a run on several sizes: the test set as configured
    overrides = {**({} if train is None else {'image_size': train}), **opened.resizing}

    def cell(direction: str, shift: float) -> Cell:
        key = {'encoding': opened.label, 'direction': direction, 'shift': shift}
        pixels = roll_pixels(shift, direction, patch)

        def run(batch_size: int) -> list[dict[str, Any]]:
            metrics = opened.settings.metrics(overrides, batch_size, view=roll_view(pixels))
            return [dict(key, pixels=list(pixels), value=metrics[metric_key])]

        return Cell(f'{direction} {shift:g} patch', key, run, opened.settings.batch_size)

    moves = label_moves(cfg)
    if moves:
        log(f'warning: {moves}')
    header = dict(opened.header, patch_size=list(patch), translation='roll')
    identity = sweep_identity('patch_shift', cfg, checkpoint, metric_key=metric_key, **opened.resizing)
    cells = [cell(d, s) for d in directions for s in shifts]
    return run_sweep(cells, header, identity, out_dir, force, show_progress, log)


def label_moves(cfg) -> str | None:
    """The warning for a test set whose label moves with the image (``metainfo['label_moves_with_image']``)."""
    dataset = DATASETS.build(copy.deepcopy(cfg.test_dataloader.dataset))
    meta = getattr(dataset, 'metainfo', None) or {}
    if not meta.get('label_moves_with_image'):
        return None
    return (
        f"the {meta.get('task', 'test')!r} task's label says where things lie, so a shift changes the right answer "
        'itself: its accuracy falls for that reason too, not only for want of robustness (a task whose label does not '
        "move, such as Shapes2D 'relation', measures robustness alone)"
    )


#: a classifier checkpoint on shifted inputs into ``out_dir``, then its plot there
evaluate_patch_shift = SWEEPS['patch_shift'].evaluate


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """``vispe eval-patch-shift CONFIG CKPT [--shifts ...] [--directions ...] --out DIR``: results, plot and table."""
    parser = argparse.ArgumentParser(
        prog=prog, description='Evaluate a classifier checkpoint on its test images shifted by fractions of a patch'
    )
    common_parser_args(parser)
    sweep_parser_args(parser)
    engine.force_parser_args(parser)
    parser.add_argument(
        '--shifts', nargs='+', type=float, default=None, help='fractions of a patch (default: 0 0.25 0.5 0.75 1)'
    )
    parser.add_argument('--directions', nargs='+', choices=list(DIRECTIONS), default=None, help='default: x y xy')
    args = parser.parse_args(argv)
    console = report.console()
    results = engine.sweep_for_tool(args, evaluate_patch_shift, args.shifts, args.directions, log=console.print)
    name = os.path.basename(args.checkpoint)
    patch = 'x'.join(map(str, results['patch_size']))
    title = f'{results["metric"]} (%) of {name} by shift (in {patch} px patches): {report.describe(results)}'
    finish_sweep(console, results_table(results['results'], title=title, failed=results['failed']), results, args.out)


__all__ = [
    'DEFAULT_SHIFTS',
    'DIRECTIONS',
    'evaluate_patch_shift',
    'label_moves',
    'main',
    'plot',
    'results_table',
    'roll_pixels',
    'roll_view',
    'sweep',
]
