"""``SWEEPS``: every kind of evaluation sweep, registered by the module that runs it, as encodings are in
``vispe.registry.ENCODINGS``. A kind holds what the rest of vispe needs to know of it:

* its identity: ``name``, the ``sweep`` string its results.json carries (``identity.sweep_identity``);
* its pivot for ``vispe compare-results`` (``merge``): the row fields besides the run, each row's column, the
  columns' order, the x axis label, and ``row_metric``, the row field naming each row's metric when one results.json
  holds several (the generation sweep's);
* its run (the sweep function), its plot (results.json -> ``out_dir/results.png``) and ``evaluate``, both in turn;
* its command: ``vispe <command>``, the line ``vispe -h`` lists, and the module whose ``main(argv, prog)`` runs it.

A new sweep is one module in vispe/sweeps holding its sweep function under ``@SWEEPS.register(...)``, and its name
in ``vispe/sweeps/__init__.py``'s imports: compare-results, ``evaluate`` and the ``vispe`` command listing read it
from here.
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
    evaluate.__doc__ = f'{sweep.__module__}.{sweep.__name__} into ``out_dir``, then its plot {PLOT} there.'
    return evaluate


@dataclass(frozen=True)
class SweepKind:
    """One kind of sweep (module doc). ``run(cfg, checkpoint, *settings, device, show_progress=, out_dir=, force=,
    log=)`` returns results.json's document; ``plot(results, path)`` draws it; ``column(row)`` is a row's column in
    a merged table, ``order`` sorts those columns (None: as they first appear); ``main`` is the module path of the
    command (its ``main(argv, prog)``) or that function itself."""

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
        """Decorator of a sweep function: ``@SWEEPS.register('resolution', plot=..., fields=..., column=...,
        xlabel=..., command=..., about=..., main=..., order=..., row_metric=...)`` (``SweepKind``'s fields);
        returns the function unchanged."""

        def decorate(run: Callable[..., Results]) -> Callable[..., Results]:
            self.add(SweepKind(name=name, run=run, **spec))
            return run

        return decorate

    def by_command(self) -> dict[str, SweepKind]:
        """{command: kind}, in registration order."""
        return {kind.command: kind for kind in self._kinds.values()}


SWEEPS = SweepRegistry()


def finish_sweep(console: Any, table: Any, results: Results, out: str) -> NoReturn:
    """The end of an evaluation command: its table, where results.json and the plot are, and its exit (the error
    line when cells failed)."""
    console.print(table)
    console.print(f'results: {os.path.join(out, RESULTS)}\nplot: {os.path.join(out, PLOT)}')
    sys.exit(failure_message(results, out))


__all__ = ['PLOT', 'SWEEPS', 'SweepKind', 'SweepRegistry', 'finish_sweep', 'sweep_and_plot']
