"""One progress line over a sequence of training-and-evaluation runs (the demos): run k of n, what it is doing, and
the whole sequence's elapsed time and ETA. Each run's own output (mmengine's environment dump and iteration logs, the
sweeps' lines, warnings) goes to a log file in its folder instead of the terminal.

The ETA counts the training iterations left at the speed measured in this process, plus each evaluation left at
the time the last one took (before any has run, ``EVAL_SHARE`` of a run's training).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from mmengine.hooks import Hook

#: an evaluation's time as a share of its run's training, until one has been measured
EVAL_SHARE = 0.15
#: seconds between two lines when the output is not a terminal (a log file or a pipe)
PIPE_INTERVAL = 30.0


def clock(seconds: float) -> str:
    """'m:ss' (or 'h:mm:ss')."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'


class IterationHook(Hook):
    """Reports each training iteration of a Runner to a ``RunsProgress``."""

    priority = 'VERY_LOW'

    def __init__(self, progress: RunsProgress) -> None:
        self.progress = progress

    def before_train(self, runner) -> None:
        self.progress.training(runner.iter, runner.max_iters)

    def after_train_iter(self, runner, batch_idx: int, data_batch: Any = None, outputs: Any = None) -> None:
        self.progress.training(runner.iter + 1, runner.max_iters)


class RunsProgress:
    """The progress line of ``labels``' runs, written to ``stream`` (the terminal: one line rewritten in place).

    Use ``run(k, log_file)`` around run k's training and evaluation, ``hook()`` as a training hook of that run and
    ``evaluating()`` when its evaluation starts; ``close()`` ends the line.
    """

    def __init__(self, labels: Sequence[str], stream: TextIO | None = None) -> None:
        self.labels = list(labels)
        self.stream = stream if stream is not None else sys.stdout
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.index = 0
        self.doing = 'starting'
        self.iters_per_run: int | None = None
        self.iters_done = [0] * len(self.labels)  # per run: the iterations done (run here, resumed or reused)
        self.timed_iters = 0  # iterations run in this process, and their seconds
        self.train_seconds = 0.0
        self.evaluated = [False] * len(self.labels)
        self.eval_seconds: float | None = None
        self.last_tick: float | None = None
        self.eval_start: float | None = None
        self.last_shown = 0.0
        self.width = 0
        self.log_file = ''

    # -- what the runs report ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def run(self, index: int, log_file: str) -> Iterator[None]:
        """Run ``index`` starts: its output goes to ``log_file`` until it ends."""
        self.index, self.doing, self.last_tick, self.log_file = index, 'starting', None, log_file
        self.show(force=True)
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        with open(log_file, 'a') as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield
        self.end_evaluation()
        self.evaluated[index] = True
        if self.iters_per_run is not None:
            self.iters_done[index] = self.iters_per_run
        self.show(force=True)

    def hook(self) -> IterationHook:
        return IterationHook(self)

    def training(self, done: int, total: int) -> None:
        now = time.monotonic()
        self.iters_per_run = total
        if self.last_tick is not None and done > self.iters_done[self.index]:
            self.timed_iters += done - self.iters_done[self.index]
            self.train_seconds += now - self.last_tick
        self.last_tick = now
        self.iters_done[self.index] = done
        self.doing = f'training, iteration {done} of {total}'
        self.show()

    def evaluating(self, what: str = 'evaluating') -> None:
        self.doing, self.eval_start = what, time.monotonic()
        self.show(force=True)

    def end_evaluation(self) -> None:
        if self.eval_start is not None:
            self.eval_seconds = time.monotonic() - self.eval_start
            self.eval_start = None

    # -- the line --------------------------------------------------------------------------------------------------

    def eta(self) -> float | None:
        """Seconds left, or None before any iteration was timed."""
        if not self.timed_iters or self.iters_per_run is None:
            return None
        per_iter = self.train_seconds / self.timed_iters
        iters_left = sum(self.iters_per_run - done for done in self.iters_done)
        per_eval = self.eval_seconds if self.eval_seconds is not None else EVAL_SHARE * self.iters_per_run * per_iter
        evals_left = self.evaluated.count(False)
        running = 0.0
        if self.eval_start is not None:  # the current evaluation: what is left of it
            evals_left -= 1
            running = max(0.0, per_eval - self.elapsed(self.eval_start))
        return iters_left * per_iter + evals_left * per_eval + running

    def elapsed(self, since: float | None = None) -> float:
        return time.monotonic() - (self.start if since is None else since)

    def line(self) -> str:
        eta = self.eta()
        left = 'ETA --:--' if eta is None else f'about {clock(eta)} left'
        run = f'run {self.index + 1} of {len(self.labels)} ({self.labels[self.index]})'
        return f'{run}: {self.doing} | elapsed {clock(self.elapsed())}, {left}'

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.tty and not force and now - self.last_shown < PIPE_INTERVAL:
            return
        if self.tty and not force and now - self.last_shown < 0.5:
            return
        self.last_shown = now
        text = self.line()
        if self.tty:
            self.stream.write('\r' + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + '\n')
        self.stream.flush()

    def close(self) -> None:
        """The last line: the total time, or where the runs stopped and that run's log; the cursor after it."""
        if all(self.evaluated):
            text = f'all {len(self.labels)} runs done in {clock(self.elapsed())}'
        else:
            text = (
                f'stopped in run {self.index + 1} of {len(self.labels)} ({self.labels[self.index]}) after '
                f'{clock(self.elapsed())}; its output: {self.log_file}'
            )
        self.stream.write(('\r' + text.ljust(self.width) if self.tty else text) + '\n')
        self.stream.flush()


__all__ = ['EVAL_SHARE', 'IterationHook', 'RunsProgress', 'clock']
