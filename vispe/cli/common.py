"""What the orchestration commands (compare, the demos) share."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from vispe.engine.workdir import out_folder
from vispe.experiments.compare import check_summary, sweep_runs, write_summary


def print_predictions(predictions: Sequence[dict[str, Any]]) -> None:
    """Print the top-k classes of each file (``vispe infer``, tools/infer_points.py): ``file: best (name p, ...)``;
    each file's warnings and errors go to stderr, and a failed file makes the exit status non-zero (the others are
    still printed)."""
    failed = 0
    for pred in predictions:
        for warning in pred['warnings']:
            print(f'warning: {warning}', file=sys.stderr)
        if 'error' in pred:
            failed += 1
            print(f'error: {pred["error"]}', file=sys.stderr)
            continue
        ranked = ', '.join(f'{name} {p:.1%}' for name, p in pred['top'])
        print(f'{pred["file"]}: {pred["top"][0][0]} ({ranked})')
    if failed:
        sys.exit(f'{failed} of {len(predictions)} files failed')


def bold_log(console: Console) -> Callable[[str], None]:
    """The demos' log: each step's line in bold."""
    return lambda line: console.print(f'[bold]{line}[/bold]')


def sweep_demo(
    console: Console,
    runs: tuple[str, dict[str, str], Sequence[str]],
    out: str,
    sweep: Callable[..., dict[str, Any]],
    plot: Callable[[Sequence[dict], str], str],
    summary: Callable[[list[dict]], tuple[str, str]],
) -> None:
    """A demo of trained-then-swept runs (demo-points, demo-cameras): ``runs`` = (task, label -> config, the labels
    to run), each trained and swept into ``out/<label>``; ``summary(rows)`` = (the text of out/summary.md, what the
    terminal shows)."""
    start = time.time()
    check_summary(out)  # a file in the way of the summary stops the demo before it trains anything
    task, configs, labels = runs
    rows = sweep_runs(task, configs, labels, out, sweep, bold_log(console))
    text, shown = summary(rows)
    plot_path = write_summary(out, text, rows, plot)
    console.print(shown)
    console.print(f'summary: {out}/summary.md; plot: {plot_path}')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


def demo_parser(prog: str | None, doc: str | None, default_out: str) -> argparse.ArgumentParser:
    """A demo's parser: its module doc as the description, and --out (where its runs and summary go)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=out_folder, default=default_out, help='where the runs and the summary go')
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace summary files in OUT that vispe did not write (a file of another format is never written over)',
    )
    return parser
