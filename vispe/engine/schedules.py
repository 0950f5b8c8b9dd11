"""Parameter schedules that fit the run (``VispeRunner.build_param_scheduler`` applies these).

A warm-up that would end after the run is clipped to it (the same ramp, cut) and a scheduler that would begin after it
is left out, each change logged; a scheduler that still ends after the run is refused with ``ConfigError``. Schedulers
without ``end`` follow the run's length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmengine.optim.scheduler.param_scheduler import INF

from vispe.engine.config import ConfigError


class RunLength:
    """How long a run is: ``max_epochs`` (0 or None for an iteration-based run) and ``max_iters``."""

    def __init__(self, max_epochs: int | None, max_iters: int | None) -> None:
        self.max_epochs, self.max_iters = max_epochs or 0, max_iters or 0

    def of(self, by_epoch: bool) -> tuple[int, str]:
        """(the run's length, its unit) in a scheduler's unit."""
        return (self.max_epochs, 'epoch') if by_epoch else (self.max_iters, 'iteration')

    @property
    def epoch_length(self) -> int:
        """Iterations per epoch (1 for an iteration-based run)."""
        return max(1, self.max_iters // max(1, self.max_epochs)) if self.max_epochs else 1


def fit_schedules(schedulers: Any, run: RunLength, warn: Callable[[str], None]) -> Any:
    """The scheduler configs with over-long warm-ups clipped to ``run`` and late schedulers left out, each change said
    through ``warn``."""
    if isinstance(schedulers, dict) and 'type' not in schedulers:  # one list per optimizer
        return {name: fit_schedules(group, run, warn) for name, group in schedulers.items()}
    if not isinstance(schedulers, (list, tuple)):
        return schedulers if schedulers is None else fit_schedules([schedulers], run, warn)
    fitted = []
    for index, config in enumerate(schedulers):
        fitted += _fit_schedule(index, config, run, warn)
    return fitted


def _fit_schedule(index: int, config: Any, run: RunLength, warn: Callable[[str], None]) -> list[Any]:
    if not isinstance(config, dict):
        return [config]
    by_epoch = config.get('by_epoch', True)
    length, unit = run.of(by_epoch)
    name = f'param_scheduler[{index}] ({config.get("type")})'
    begin, end = config.get('begin', 0), config.get('end', INF)
    if not length or begin < length and (end == INF or end <= length):
        return [config]
    if begin >= length:
        warn(
            f'{name} begins at {unit} {begin}, where this {length}-{unit} run has ended: left out (the run ends '
            'before it starts)'
        )
        return []
    steps = run.epoch_length if by_epoch and config.get('convert_to_iter_based') else 1  # steps of the ramp a unit
    clipped = clipped_warmup(config, length, steps)
    if clipped is None:
        return [config]  # a decay set for a longer run: refused by check_schedule_fits, naming the fix
    warn(
        f'{name} is a warm-up to {unit} {end}, longer than this {length}-{unit} run: clipped to the run (the same '
        f'ramp, stopped at {unit} {length}: the learning rate reaches {clipped.get("end_factor", 1.0):.3g} of '
        'the base rate, not the base rate)'
    )
    return [clipped]


def check_schedule_fits(index: int, scheduler: Any, run: RunLength) -> None:
    """ConfigError when the built ``scheduler`` ends after the run's last epoch or iteration."""
    end = getattr(scheduler, 'end', INF)
    if end == INF:
        return
    length, unit = run.of(scheduler.by_epoch)
    if end <= length:
        return
    as_epochs = '' if scheduler.by_epoch or run.max_epochs <= 1 else f' (epoch {end / run.epoch_length:g})'
    raise ConfigError(
        f'param_scheduler[{index}] ({type(scheduler).__name__}) ends at {unit} {end}{as_epochs}, after the '
        f"run's last {unit} ({length}): it was set for a longer run and would be cut off (a decay that never "
        'reaches its floor, a warm-up that never reaches the base rate). Drop its end, so that it follows the '
        f"run's length, or set it to at most the run's length (param_scheduler.{index}.end)"
    )


def clipped_warmup(config: dict, length: int, steps: int) -> dict | None:
    """A LinearLR or ConstantLR warm-up config ending at ``length`` on the same ramp; None for anything else."""
    begin, end = config.get('begin', 0), config['end']
    kind = config.get('type')
    if kind == 'ConstantLR':
        return dict(config, end=length)
    start, stop = config.get('start_factor', 1.0 / 3), config.get('end_factor', 1.0)
    if kind != 'LinearLR' or start >= stop:
        return None
    reached = start + (stop - start) * ((length - begin) * steps - 1) / ((end - begin) * steps - 1)
    return dict(config, end=length, end_factor=reached)


__all__ = ['RunLength', 'check_schedule_fits', 'clipped_warmup', 'fit_schedules']
