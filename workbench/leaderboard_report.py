"""The leaderboard's tables and figures from its statistics (``Stats``: mean, spread and seeds per task, encoding,
strategy and resolution): per task with each encoding's plain and best strategy (``markdown``, ``plot``), across
training regimes (``regime_markdown``, ``regime_plot``), Three-Cell beside its paper with the epoch each run left
chance (``three_cell_markdown``), and the line a model card quotes (``card_note``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from vispe.evaluation import figures, report
from vispe.evaluation.outputs import save_figure

#: the strategy that means "no extrapolation trick" for each family; encodings without strategies report 'default';
#: 'extend' is loope's raw curve index (its default 'interpolate' rescales it)
PLAIN = ('none', 'default', 'bicubic', 'extend')

Key = tuple[str, str, str, str]  # task, encoding, strategy, resolution
Stats = dict[Key, report.Stat]  # mean, standard deviation, number of seeds (equal to such tuples)


def summarize(values: dict[Key, list[float]]) -> Stats:
    """(mean, standard deviation (0 for one seed), seeds) per key."""
    return {k: report.summarize(v) for k, v in values.items()}


def best_strategy(stats: Stats, task: str, encoding: str, train_res: str) -> str:
    """The strategy with the highest mean over the resolutions other than the training one; the plain one for a task
    asked at its training size only (Three-Cell)."""
    scores: dict[str, list[float]] = {}
    for (t, enc, strat, res), (mean, _, _) in stats.items():
        if t == task and enc == encoding and res != train_res:
            scores.setdefault(strat, []).append(mean)
    if not scores:
        return plain_strategy(stats, task, encoding)
    return max(scores, key=lambda s: statistics.fmean(scores[s]))


def plain_strategy(stats: Stats, task: str, encoding: str) -> str:
    """The no-trick strategy of this encoding (none / default / bicubic for learned tables / extend for loope)."""
    have = {strat for (t, enc, strat, _) in stats if t == task and enc == encoding}
    if not have:
        raise ValueError(f'no results for {encoding} on {task}')
    plain = [s for s in PLAIN if s in have]
    if not plain:
        raise ValueError(f'{encoding} on {task}: none of its strategies {sorted(have)} is a plain one {PLAIN}')
    return plain[0]


def strategy_pivot(stats: Stats, task: str, resolutions: Sequence[str], best: bool) -> report.Pivot:
    """One line per encoding of ``task`` with its plain (or ``best``) strategy: (encoding, strategy) x resolution."""
    table = report.Pivot(('encoding', 'strategy'), columns=list(resolutions))
    for enc in sorted({enc for (t, enc, _, _) in stats if t == task}):
        strat = best_strategy(stats, task, enc, resolutions[0]) if best else plain_strategy(stats, task, enc)
        table.keys.append((enc, strat))
        table.cells.update(
            {((enc, strat), r): stats[(task, enc, strat, r)] for r in resolutions if (task, enc, strat, r) in stats}
        )
    return table


def markdown(stats: Stats, task: str, resolutions: Sequence[str]) -> str:
    """One table per task: each encoding with its plain strategy and, if different, its best one."""
    plain, best = strategy_pivot(stats, task, resolutions, False), strategy_pivot(stats, task, resolutions, True)
    table = report.Pivot(plain.index, columns=list(resolutions), cells={**plain.cells, **best.cells})
    labels = {}
    for (enc, strat), (_, top) in zip(plain.keys, best.keys):
        table.keys += list(dict.fromkeys([(enc, strat), (enc, top)]))
        if top != strat:
            labels[(enc, top)] = (enc, f'{top} (best)')
    return report.markdown(table, '.1f', spread=True, labels=labels)


def escape_epoch(losses: Mapping[str, float], below: float) -> int | None:
    """The first epoch whose mean training loss (``losses``: epoch as text -> loss, run.json's ``train_loss``) is
    below ``below``; None if none is."""
    return next((int(e) for e in sorted(losses, key=int) if losses[e] < below), None)


def three_cell_markdown(
    stats: Stats,
    task: str,
    resolution: str,
    losses: Mapping[str, Sequence[Mapping[str, float] | None]],
    paper: Mapping[str, tuple[str, float]],
    below: float,
) -> str:
    """Three-Cell's table beside the paper's averages (``paper``: encoding -> (the paper's name, its average)), best
    first: each encoding's top-1 at ``resolution`` (mean ± std over its seeds) and, per seed, the first epoch whose
    training loss is below ``below`` (``losses``: encoding -> one loss record per seed, None where a run has none:
    '?')."""
    rows = []
    for enc in {enc for (t, enc, _, _) in stats if t == task}:
        mean, std, seeds = stats[(task, enc, plain_strategy(stats, task, enc), resolution)]
        name, average = paper.get(enc, ('-', None))
        epochs = [
            '?' if record is None else str(escape_epoch(record, below) or 'never') for record in losses.get(enc, ())
        ]
        counterpart = f'{name} ({average:.1f})' if average is not None else name
        rows.append((-mean, enc, counterpart, f'{mean:.1f} ± {std:.1f}' if seeds > 1 else f'{mean:.1f}', seeds, epochs))
    lines = [
        f"| encoding | the paper's counterpart (its average) | top-1 at {resolution} px | seeds | "
        f'left chance (training loss < {below}) at epoch |',
        '|---|---|---|---|---|',
    ]
    for _, enc, counterpart, top1, seeds, epochs in sorted(rows):
        lines.append(f'| `{enc}` | {counterpart} | {top1} | {seeds} | {", ".join(epochs) or "?"} |')
    return '\n'.join(lines)


def plot(stats: Stats, tasks: Sequence[str], resolutions: Sequence[str], path: str) -> str:
    """One row per task, columns 'plain strategy' and 'best strategy': accuracy against test resolution in
    increasing pixel count (categories, so 32x48 and 48x32 are two ticks; the training size ``resolutions[0]`` is
    dotted), one line per encoding with its spread over seeds as error bars, its own colour and marker. Saved as PNG."""
    fig, axes = figures.plt().subplots(
        len(tasks), 2, figsize=(11, 4 * len(tasks)), dpi=110, squeeze=False, sharey='row'
    )
    for row, task in enumerate(tasks):
        for col, title in enumerate(('plain strategy', 'best strategy')):
            ax = axes[row][col]
            table = strategy_pivot(stats, task, resolutions, best=col == 1)  # best: judged with 1x = resolutions[0]
            table.columns = sorted(resolutions, key=report.resolution_order)
            styles = figures.key_styles(table.keys)  # one colour and marker per encoding, every panel
            figures.draw_lines(ax, table, lambda key: f'{key[0]} ({key[1]})', resolutions[0], styles=styles)
            ax.set_title(f'shapes2d {task}: {title}')
            ax.set_xlabel('test resolution (H x W; dotted: training)')
            ax.set_ylabel('top-1 accuracy (%)')
            ax.legend(fontsize=7)
    return figures.save_figure(fig, path)


def card_note(stats: Stats, task: str, encoding: str, resolutions: Sequence[str]) -> str:
    """The leaderboard's line for one model card: its encoding's mean ± std over seeds with the best strategy."""
    best = best_strategy(stats, task, encoding, resolutions[0])
    cells = ', '.join(
        f'{mean:.1f} ± {std:.1f} at {res} px'
        for res in resolutions
        for mean, std, _ in [stats.get((task, encoding, best, res), (float('nan'), 0.0, 0))]
    )
    seeds = max(n for (t, e, _, _), (_, _, n) in stats.items() if t == task and e == encoding)
    over = f'{seeds} seeds' if seeds > 1 else 'one seed'
    return f'Over {over} (the leaderboard, ../README.md), `{encoding}` with its best strategy `{best}`: {cells}.'


def task_label(task: str, regime: str) -> str:
    """The leaderboard's name of a task trained in ``regime``: the task itself for ``fixed``, 'task (regime)'."""
    return task if regime == 'fixed' else f'{task} ({regime})'


def regime_markdown(stats: Stats, task: str, regimes: Sequence[str], resolutions: Sequence[str]) -> str:
    """One table per task across training regimes: each encoding's row in each regime, with its plain strategy
    (what the regime changes when nothing is rescaled at test time), mean ± std over seeds."""
    table = report.Pivot(('encoding', 'regime', 'strategy'), columns=list(resolutions))
    labels = {task_label(task, r): r for r in regimes}
    encodings = sorted({enc for (t, enc, _, _) in stats if t in labels})
    for enc in encodings:
        for label, regime in labels.items():
            if not any(t == label and e == enc for (t, e, _, _) in stats):
                continue
            strat = plain_strategy(stats, label, enc)
            table.keys.append((enc, regime, strat))
            table.cells.update(
                {
                    ((enc, regime, strat), r): stats[(label, enc, strat, r)]
                    for r in resolutions
                    if (label, enc, strat, r) in stats
                }
            )
    return report.markdown(table, '.1f', spread=True)


def regime_pivot(
    stats: Stats, task: str, encoding: str, regimes: Sequence[str], resolutions: Sequence[str]
) -> report.Pivot:
    """One encoding on one task: a line per training regime (its plain strategy) over ``resolutions``."""
    table = report.Pivot(('regime',), columns=list(resolutions))
    for regime in regimes:
        label = task_label(task, regime)
        if not any(t == label and e == encoding for (t, e, _, _) in stats):
            continue
        strat = plain_strategy(stats, label, encoding)
        table.keys.append((regime,))
        table.cells.update(
            {
                ((regime,), r): stats[(label, encoding, strat, r)]
                for r in resolutions
                if (label, encoding, strat, r) in stats
            }
        )
    return table


def regime_plot(stats: Stats, task: str, regimes: Sequence[str], resolutions: Sequence[str], path: str) -> str:
    """What the training regime changes, per encoding: one panel per encoding (its plain strategy), one line per
    regime (same colour and marker in every panel), accuracy against test resolution in increasing pixel count (the
    2:1 / 1:2 targets at the training token count beside the training size, which is dotted). Saved as PNG."""
    labels = {task_label(task, r) for r in regimes}
    encodings = sorted({enc for (t, enc, _, _) in stats if t in labels})
    if not encodings:
        raise ValueError(f'no results for {task} in the regimes {list(regimes)}')
    columns = sorted(resolutions, key=report.resolution_order)
    cols = min(4, len(encodings))
    rows = -(-len(encodings) // cols)
    fig, axes = figures.plt().subplots(
        rows, cols, figsize=(3.6 * cols, 3.0 * rows), dpi=110, squeeze=False, sharey=True
    )
    styles = figures.key_styles([(r,) for r in regimes])  # a regime looks the same in every panel
    train = f'{resolutions[0]} px (the fixed regime trains there)'
    for ax, encoding in zip(axes.flat, encodings):
        table = regime_pivot(stats, task, encoding, regimes, columns)
        figures.draw_lines(ax, table, lambda key: key[0], resolutions[0], train_label=train, styles=styles)
        strategies = {plain_strategy(stats, task_label(task, r), encoding) for (r,) in table.keys}
        ax.set_title(f'{encoding} ({", ".join(sorted(strategies))})', fontsize=9)
        ax.tick_params(axis='x', labelsize=7, rotation=45)
    for ax in list(axes.flat)[len(encodings) :]:
        ax.axis('off')
    for ax in axes[:, 0]:
        ax.set_ylabel('top-1 accuracy (%)')
    legend = max(axes.flat[: len(encodings)], key=lambda ax: len(ax.get_legend_handles_labels()[1]))  # every regime
    handles, names = legend.get_legend_handles_labels()
    fig.legend(handles, names, loc='lower center', ncol=len(names), fontsize=8, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f'shapes2d {task}: accuracy by training regime (plain strategy; error bars: spread over seeds)')
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    try:
        return save_figure(fig, path)
    finally:
        figures.plt().close(fig)


__all__ = [
    'Key',
    'PLAIN',
    'Stats',
    'best_strategy',
    'card_note',
    'markdown',
    'plain_strategy',
    'plot',
    'regime_markdown',
    'regime_pivot',
    'regime_plot',
    'strategy_pivot',
    'summarize',
    'task_label',
]
