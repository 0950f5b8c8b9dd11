"""``SWEEPS``: every kind of evaluation sweep, registered by the module that runs it.

A kind holds its identity (``name``, the ``sweep`` string of its results.json), its pivot for ``vispe compare-results``,
its run, plot and ``evaluate``, and its command. A new sweep is one module in vispe/sweeps with its function under
``@SWEEPS.register(...)``, imported in ``vispe/sweeps/__init__.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from vispe.evaluation import outputs
from vispe.sweeps.engine import RESULTS, Log, failure_message

#: the figure ``evaluate`` writes beside results.json
PLOT = 'results.png'

Results = dict[str, Any]
Row = Mapping[str, Any]


def sweep_and_plot(name: str, sweep: Callable[..., Results], plot: Callable[[Results, str], Any]):
    """``name``: the sweep into ``out_dir``, then its plot at ``out_dir/results.png``."""

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
    evaluate.__doc__ = f'{sweep.__module__}.{sweep.__name__} into ``out_dir``, then its plot {PLOT} there.'
    return evaluate


@dataclass(frozen=True)
class SweepKind:
    """One kind of sweep: ``run`` returns results.json's document, ``plot(results, path)`` draws it, ``column(row)`` and
    ``order`` place rows in a merged table, ``main`` is the command (a module path or the function)."""

    name: str
    run: Callable[..., Results]
    plot: Callable[[Results, str], Any]
    fields: tuple[str, ...]
    column: Callable[[Row], str]
    xlabel: str
    command: str
    about: str
    main: str | Callable[..., Any]
    order: Callable[[str], Any] | None = None
    row_metric: str | None = None

    @property
    def evaluate(self) -> Callable[..., Results]:
        """The sweep into ``out_dir`` then its plot there (``sweep_and_plot``), as the commands and compare run it."""
        return sweep_and_plot(f'evaluate_{self.name}', self.run, self.plot)

    def command_main(self) -> Callable[..., Any]:
        """The command's ``main(argv, prog)``, its module imported on demand (the sweeps never import vispe.cli)."""
        if callable(self.main):
            return self.main
        return importlib.import_module(self.main).main


class SweepRegistry(Mapping[str, SweepKind]):
    """The sweep kinds by name, in registration order; ``register`` adds one, refusing a name or command taken."""

    def __init__(self) -> None:
        self._kinds: dict[str, SweepKind] = {}

    def __getitem__(self, name: str) -> SweepKind:
        return self._kinds[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def add(self, kind: SweepKind) -> SweepKind:
        """Register ``kind``; ValueError when its name or command belongs to another kind."""
        for other in self._kinds.values():
            if kind.name == other.name or kind.command == other.command:
                raise ValueError(
                    f'sweep {kind.name!r} (vispe {kind.command}) clashes with the registered sweep {other.name!r} '
                    f'(vispe {other.command}) defined in {other.run.__module__}: give it another name and command'
                )
        self._kinds[kind.name] = kind
        return kind

    def remove(self, name: str) -> SweepKind:
        """Unregister the kind ``name`` (what a test that registered one does afterwards); returns it."""
        return self._kinds.pop(name)

    def register(self, name: str, **spec: Any) -> Callable[[Callable[..., Results]], Callable[..., Results]]:
        """Decorator registering a sweep function with ``SweepKind``'s fields; returns it unchanged."""

        def decorate(run: Callable[..., Results]) -> Callable[..., Results]:
            self.add(SweepKind(name=name, run=run, **spec))
            return run

        return decorate

    def by_command(self) -> dict[str, SweepKind]:
        """{command: kind}, in registration order."""
        return {kind.command: kind for kind in self._kinds.values()}


SWEEPS = SweepRegistry()


def finish_sweep(console: Any, table: Any, results: Results, out: str) -> NoReturn:
    """The end of an evaluation command: its table, where results.json and the plot are, and its exit."""
    console.print(table)
    console.print(f'results: {os.path.join(out, RESULTS)}\nplot: {os.path.join(out, PLOT)}')
    sys.exit(failure_message(results, out))


__all__ = ['PLOT', 'SWEEPS', 'SweepKind', 'SweepRegistry', 'finish_sweep', 'sweep_and_plot']
