"""Figures of sweep results, one set of rules for all: each line its own colour and marker, on the ticks; the training
size dotted; chance dashed, with the axis from 0; the legend outside the data, each label once; titles that wrap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vispe.evaluation import outputs
from vispe.evaluation.report import Key, Pivot, key_text

#: one marker per line: twelve shapes that differ in outline, so lines that meet stay apart
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*', 'h', 'p')
#: the gid of the lines that mark a reference (training size, chance), listed last in legends
REFERENCE = 'reference'
#: characters of a title line before it wraps (the figure widens to fit it)
TITLE_WIDTH = 120


def plt():
    """matplotlib.pyplot on the Agg backend: figures are files, never windows."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as pyplot

    return pyplot


def line_styles(count: int) -> list[dict[str, Any]]:
    """A colour, marker and marker size for each of ``count`` lines, every one distinct: tab10's colours up to ten
    lines, tab20's (dark hues first) up to twenty; markers shrink down the list, so that equal points nest."""
    cmap = plt().get_cmap('tab10' if count <= 10 else 'tab20')
    order = list(range(cmap.N)) if count <= 10 else [*range(0, 20, 2), *range(1, 20, 2)]
    sizes = [8.0 - 3.0 * i / max(count - 1, 1) for i in range(count)]
    return [
        dict(color=cmap(order[i % len(order)]), marker=MARKERS[i % len(MARKERS)], markersize=sizes[i])
        for i in range(count)
    ]


def key_styles(keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
    """``line_styles`` by row key, for figures whose panels show the same keys."""
    return dict(zip(keys, line_styles(len(keys))))


def draw_lines(
    ax,
    table: Pivot,
    label: Callable[[Key], str] = key_text,
    train_column: str | None = None,
    spread: bool = True,
    train_label: str = 'train resolution',
    chance: float | None = None,
    styles: Mapping[Key, dict[str, Any]] | None = None,
) -> None:
    """One line per row key over the pivot's columns as categorical ticks (each its own colour and marker, on the
    ticks); error bars when ``spread``; a dotted line at ``train_column``; a dashed line at ``chance`` (a top-1 in
    percent), with the y axis from 0. ``styles`` (``key_styles``) keeps a key's look the same across panels."""
    xs = list(range(len(table.columns)))
    styles = styles or key_styles(table.keys)
    for key in table.keys:
        style = styles[key]
        stats = [table.stat(key, c) for c in table.columns]
        means, stds = [s.mean for s in stats], [s.std for s in stats]
        yerr = stds if spread and any(stds) else None
        ax.errorbar(xs, means, yerr=yerr, capsize=3, linewidth=1.4, label=label(key), **style)
    if train_column is not None and train_column in table.columns:
        ax.axvline(table.columns.index(train_column), color='grey', linestyle=':', label=train_label, gid=REFERENCE)
    if chance is not None:
        ax.axhline(chance, color='black', linestyle='--', linewidth=1.0, label=f'chance ({chance:.3g}%)', gid=REFERENCE)
        ax.set_ylim(bottom=0)
    ax.set_xticks(xs, table.columns)
    ax.set_xlim(-0.5, len(table.columns) - 0.5)
    ax.grid(alpha=0.3)


def legend_outside(ax, fontsize: float = 7) -> None:
    """``ax``'s legend to the right of the axes, outside the data, each label once: the lines in drawing order, then
    the reference lines (training size, chance)."""
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    unique = dict(sorted(unique.items(), key=lambda item: getattr(item[1], 'get_gid', lambda: None)() == REFERENCE))
    ax.legend(unique.values(), unique.keys(), loc='upper left', bbox_to_anchor=(1.02, 1.0), fontsize=fontsize)


def chance_level(results: Mapping[str, Any], metric: str = 'accuracy') -> float | None:
    """Chance top-1 in percent (100 / classes) of a classifier's results.json, from its config's class count; None
    for another metric or when the config names no class count."""
    if metric != 'accuracy':
        return None
    config = {**(results.get('resolved_config') or {}), **(results.get('trained_config') or {})}
    for key in ('model.backbone.num_classes', 'model.num_classes', 'model.head.num_classes'):
        classes = config.get(key)
        if isinstance(classes, int) and classes > 1:
            return 100.0 / classes
    return None


def save_figure(fig, path: str) -> str:
    """Tight layout, write ``path`` (checked first), close the figure; returns the path."""
    fig.tight_layout()
    try:
        return outputs.save_figure(fig, path)
    finally:
        plt().close(fig)


def plot_lines(
    table: Pivot,
    path: str,
    title: str = '',
    xlabel: str = '',
    ylabel: str = '',
    label: Callable[[Key], str] = key_text,
    train_column: str | None = None,
    chance: float | None = None,
) -> str:
    """A one-panel figure of ``draw_lines`` with its legend outside, saved as PNG at ``path``."""
    import textwrap

    title = '\n'.join(textwrap.fill(line, TITLE_WIDTH) for line in title.splitlines())
    longest = max([0, *map(len, title.splitlines())])
    width = max(6.0, 0.9 * len(table.columns) + 2, 0.075 * longest)  # a title line fits at fontsize 8
    fig, ax = plt().subplots(figsize=(width, 4.0 + 0.15 * title.count('\n')), dpi=120)
    draw_lines(ax, table, label, train_column, chance=chance)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    legend_outside(ax)
    return save_figure(fig, path)


__all__ = [
    'MARKERS',
    'chance_level',
    'draw_lines',
    'key_styles',
    'legend_outside',
    'line_styles',
    'plot_lines',
    'plt',
    'save_figure',
]
