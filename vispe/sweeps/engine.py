"""The one engine behind every evaluation sweep: cells run in order and ``DIR/results.json`` is rewritten atomically
after each, so an error, an out-of-memory cell or Ctrl-C never loses a finished cell. A rerun reuses the finished
cells (``force=True`` recomputes); results of another checkpoint, config, data, version or sweep
(``vispe.sweeps.identity``) are neither reused nor overwritten (``SweepConflict``); a cell out of memory is retried at
half the batch size down to 1, then recorded under ``failed``. results.json keeps each sweep's schema and adds
``failed``, ``complete``, ``sweep``, the identity fields and ``other_rows`` (rows of cells an earlier run asked for and
this one did not).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vispe.engine.atomic import DiskFullError, remove_partial_files
from vispe.engine.checkpoint import CheckpointError
from vispe.engine.config import ConfigError, load_config
from vispe.evaluation.outputs import OutputConflict, check_target, write_json
from vispe.sweeps.identity import describe_difference, jsonable

Row = dict[str, Any]
Log = Callable[[str], None]

RESULTS = 'results.json'
#: what torch's allocators say when they fail as plain RuntimeErrors (CPU, MPS); CUDA raises torch.OutOfMemoryError
OOM_MESSAGES = ("can't allocate memory", 'not enough memory', 'out of memory')
REMEDY = 'pass another --out, or --force to replace it'


class SweepConflict(ValueError):
    """An existing results file that this sweep must neither reuse nor overwrite."""


@dataclass
class Cell:
    """One unit of a sweep: ``run(batch_size)`` returns its rows, each holding the fields of ``key``; ``batch_size`` is
    the first tried, ``name`` its label."""

    name: str
    key: Row
    run: Callable[[int], list[Row]]
    batch_size: int


# ------------------------------------------------------------------------------------------------------------------
# the results file
# ------------------------------------------------------------------------------------------------------------------


def _matches(row: Row, key: Row) -> bool:
    return all(jsonable(row.get(k)) == v for k, v in key.items())


class ResultsStore:
    """``out_dir/results.json`` of one sweep (nothing on disk when ``out_dir`` is None): an earlier run's rows and the
    document rewritten after each cell."""

    def __init__(self, out_dir: str | None, header: Row, identity: Row, force: bool = False) -> None:
        self.path = os.path.join(out_dir, RESULTS) if out_dir else None
        if out_dir and os.path.isdir(out_dir):
            remove_partial_files(out_dir)  # a temporary results.json that an interrupted write left behind
        self.header, self.identity = dict(header), dict(identity)
        if force and self.path is not None:
            try:
                check_target(self.path, None)  # --force replaces another run's results, never a file of another kind
            except OutputConflict as err:
                raise SweepConflict(str(err)) from None
        self.previous: list[Row] = [] if force or self.path is None else self._load(self.path)

    def _load(self, path: str) -> list[Row]:
        """The finished rows of the existing file; SweepConflict for another identity or one that cannot be checked."""
        if not os.path.isfile(path):
            return []
        try:
            check_target(path, None)  # a file that is not JSON is never written over, --force or not
        except OutputConflict as err:
            raise SweepConflict(str(err)) from None
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError) as err:
            raise SweepConflict(f'{path} is not a results file this tool can read ({err}); {REMEDY}') from None
        if not isinstance(old, dict) or not isinstance(old.get('results'), list):
            raise SweepConflict(f'{path} is not a sweep results file (no "results" list); {REMEDY}')
        if 'checkpoint_sha256' not in old:
            raise SweepConflict(
                f'{path} holds results without a checkpoint and config identity (written by an older vispe), '
                f'so they cannot be checked against this checkpoint; {REMEDY}'
            )
        differ = [k for k in self.identity if k != 'resolved_config' and old.get(k) != self.identity[k]]
        if differ:
            reasons = '; '.join(describe_difference(k, old, self.identity) for k in differ)
            raise SweepConflict(f'{path} holds the results of {reasons}: {REMEDY}')
        return list(old['results']) + list(old.get('other_rows') or [])

    def finished(self, cell: Cell) -> list[Row]:
        """The earlier run's rows of ``cell`` ([] when it has none)."""
        key = jsonable(cell.key)
        return [r for r in self.previous if _matches(r, key)]

    def document(self, cells: Sequence[Cell], rows: Mapping[int, list[Row]], failed: Sequence[Row]) -> Row:
        """results.json for the cells finished so far (``rows`` by cell index), in the order of ``cells``."""
        keys = [jsonable(c.key) for c in cells]
        other = [r for r in self.previous if not any(_matches(r, k) for k in keys)]
        doc = dict(self.header)
        doc['results'] = [r for i in range(len(cells)) for r in rows.get(i, [])]
        doc['failed'] = list(failed)
        doc['complete'] = len(rows) == len(cells) and not failed
        doc.update({k: v for k, v in self.identity.items() if k != 'resolved_config'})
        if other:
            doc['other_rows'] = other
        doc['resolved_config'] = self.identity.get('resolved_config', {})
        return doc

    def save(self, doc: Row) -> None:
        if self.path is not None:
            write_json(self.path, doc, None, default=repr)  # checked when the store opened (identity and format)


# ------------------------------------------------------------------------------------------------------------------
# running cells
# ------------------------------------------------------------------------------------------------------------------


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure (CUDA, numpy, or torch's CPU allocator)."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err) for m in OOM_MESSAGES)


def free_memory() -> None:
    """Return what a failed attempt held: collect its garbage and, on CUDA, release the cached blocks."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _first_line(err: BaseException, width: int = 160) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= width else text[: width - 3] + '...'


def run_cell(cell: Cell, log: Log = print) -> tuple[list[Row], Row | None]:
    """(rows, None), halving the batch size after each out-of-memory error; ([], failure record) if 1 does not fit."""
    batch = first = max(1, int(cell.batch_size))
    while True:
        try:
            rows = cell.run(batch)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err):
                raise
            reason = f'out of memory at batch size {batch}: {_first_line(err)}'
        else:
            return [r if batch == first else dict(r, batch_size=batch) for r in rows], None
        free_memory()  # outside the except block: the traceback, and the tensors its frames held, are gone
        if batch == 1:
            log(f'{cell.name}: {reason}; recorded as failed, going on with the next cell')
            return [], dict(cell.key, error=reason)
        batch //= 2
        log(f'{cell.name}: {reason}; retrying at batch size {batch}')


def run_sweep(
    cells: Sequence[Cell],
    header: Row,
    identity: Row,
    out_dir: str | None = None,
    force: bool = False,
    show_progress: bool = True,
    log: Log = print,
) -> Row:
    """Run ``cells`` in order, reusing finished ones (unless ``force``) and writing ``out_dir/results.json`` after each;
    returns the final document. Raises SweepConflict before computing anything when ``out_dir`` holds results of
    another identity."""
    names = [c.name for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f'the sweep asks for {repeated} more than once; drop the repeats')
    store = ResultsStore(out_dir, header, identity, force)
    rows: dict[int, list[Row]] = {}
    for i, cell in enumerate(cells):
        if store.finished(cell):
            rows[i] = store.finished(cell)
    if store.path is not None and rows:
        reused = ', '.join(cells[i].name for i in sorted(rows)[:6]) + (', ...' if len(rows) > 6 else '')
        log(
            f'reusing {len(rows)} of {len(cells)} finished cells of {store.path} ({reused}), computed from this '
            'checkpoint, config, data and versions (--force recomputes them)'
        )
    failed: list[Row] = []
    store.save(store.document(cells, rows, failed))  # the folder now names this checkpoint and config
    with progress_bar(show_progress) as progress:
        task = progress.add_task('evaluating', total=len(cells), completed=len(rows)) if progress else None
        for i, cell in enumerate(cells):
            if i in rows:
                continue
            if progress:
                progress.update(task, description=cell.name)
            done, failure = run_cell(cell, log)
            if failure is None:
                rows[i] = done
            else:
                failed.append(failure)
            store.save(store.document(cells, rows, failed))
            if progress:
                progress.advance(task)
    return store.document(cells, rows, failed)


# ------------------------------------------------------------------------------------------------------------------
# for the tools and their callers
# ------------------------------------------------------------------------------------------------------------------


def progress_bar(show: bool):
    """A rich progress bar (a context manager giving it), or one giving None when ``show`` is False."""
    if not show:
        return contextlib.nullcontext()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn('{task.description}'), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())


def force_parser_args(parser) -> None:
    """``--force``, which every sweep tool takes."""
    parser.add_argument(
        '--force',
        action='store_true',
        help='recompute every cell and replace DIR/results.json, even one of another checkpoint or config '
        '(by default finished cells are reused and a results file of another checkpoint or config is refused)',
    )


def failure_message(results: Row, out_dir: str) -> str | None:
    """The tools' closing error when cells failed (None when none did)."""
    failed = results.get('failed') or []
    if not failed:
        return None
    names = '; '.join(', '.join(f'{k}={v}' for k, v in f.items() if k not in ('encoding', 'error')) for f in failed)
    return (
        f'error: {len(failed)} cell(s) did not fit in memory even at batch size 1 ({names}); the finished ones are in '
        f'{os.path.join(out_dir, RESULTS)}; rerun with a larger device or without those settings'
    )


def interrupted_message(out_dir: str) -> str:
    """The tools' line after Ctrl-C."""
    return (
        f'interrupted: the finished cells are in {os.path.join(out_dir, RESULTS)}; run the same command again to '
        'compute the rest'
    )


def sweep_for_tool(args: Any, sweep: Callable[..., Row], *settings: Any, log: Callable = print) -> Row:
    """What each sweep tool runs: its config with ``--cfg-options``, then its sweep; Ctrl-C and refusals end the process
    with one line."""
    try:
        cfg = load_config(args.config, args.cfg_options)
        return sweep(
            cfg,
            args.checkpoint,
            *settings,
            args.device,
            show_progress=not args.no_progress,
            out_dir=args.out,
            force=args.force,
            log=log,
        )
    except KeyboardInterrupt:
        sys.exit(interrupted_message(args.out))
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError, DiskFullError) as err:
        sys.exit(f'error: {err}')


def replace_args(out_dir: str, *sources: str) -> list[str]:
    """['--force'] for a caller owning ``out_dir`` whose results.json predates a ``sources`` file or has no identity."""
    path = os.path.join(out_dir, RESULTS)
    if not os.path.isfile(path):
        return []
    if any(os.path.isfile(s) and os.path.getmtime(s) > os.path.getmtime(path) for s in sources):
        return ['--force']
    try:
        with open(path) as f:
            known = 'checkpoint_sha256' in json.load(f)
    except (OSError, ValueError):
        known = False
    return [] if known else ['--force']


__all__ = [
    'Cell',
    'ResultsStore',
    'SweepConflict',
    'failure_message',
    'force_parser_args',
    'free_memory',
    'interrupted_message',
    'is_out_of_memory',
    'progress_bar',
    'replace_args',
    'sweep_for_tool',
    'run_cell',
    'run_sweep',
]
