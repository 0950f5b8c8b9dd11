"""The figure of ``encoding_maps``: one row of small heat maps per encoding, layer and strategy, one column per grid
size and query, one colour scale for the whole figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vispe.evaluation import outputs
from vispe.evaluation.encoding_maps import finite
from vispe.evaluation.figures import plt

#: what a map's colour means, by kind
UNITS = {
    'similarity': 'cosine similarity',
    'kernel': "logit minus its mean over keys, / the row group's largest",
    'reach': "gradient norm, / the row group's largest",
}


def row_key(entry: dict[str, Any]) -> tuple:
    return (entry['encoding'], entry['layer'], entry['kind'], entry['strategy'])


def group_key(entry: dict[str, Any]) -> tuple:
    """Maps scaled together: one encoding's (and layer's) maps of one kind, across strategies and sizes."""
    return (entry['encoding'], entry['layer'], entry['kind'])


def shown(entry: dict[str, Any]) -> list[list[float]]:
    """The map as drawn, before its group's scale: similarity as is, a kernel minus its mean over the finite keys."""
    values = entry['values']
    if entry['kind'] != 'kernel':
        return values
    kept = finite(values)
    mean = sum(kept) / max(len(kept), 1)
    return [[v - mean if math.isfinite(v) else math.nan for v in row] for row in values]


def scales(maps: Sequence[dict[str, Any]]) -> dict[tuple, float]:
    """Each group's divisor: 1 for similarity, else the largest absolute value drawn (1 when all are 0)."""
    out: dict[tuple, float] = {}
    for entry in maps:
        key = group_key(entry)
        if entry['kind'] == 'similarity':
            out[key] = 1.0
            continue
        top = max((abs(v) for v in finite(shown(entry))), default=0.0)
        out[key] = max(out.get(key, 0.0), top)
    return {k: v if v > 0 else 1.0 for k, v in out.items()}


def row_label(key: tuple) -> str:
    encoding, layer, kind, strategy = key
    where = encoding if layer is None else f'{encoding}, layer {layer}'
    return f'{where}\n{kind}, {strategy}'


def plot_maps(result: dict[str, Any], path: str, title: str = '') -> str:
    """``result`` (``encoding_maps`` or ``model_maps``) as a grid of heat maps saved as PNG at ``path``: a row per
    (encoding, layer, kind, strategy), a column per (size, query), every map on one colour scale from -1 to 1 (a
    kernel centred and scaled by its row group, ``UNITS``), the query marked; a camera encoding's views side by side,
    split by a line, its rig under the title. Returns the path. ValueError when ``result`` holds no map."""
    maps = result['maps']
    if not maps:
        skipped = '; '.join(f'{s["encoding"]}: {s["reason"]}' for s in result.get('skipped', []))
        raise ValueError(f'no map to draw{" (" + skipped + ")" if skipped else ""}; name an encoding that draws')
    rows = list(dict.fromkeys(row_key(m) for m in maps))
    columns = [(tuple(size), k) for size in result['sizes'] for k in range(len(result['queries']))]
    divisor = scales(maps)
    pyplot = plt()
    wide = max(len(m['values'][0]) / len(m['values']) for m in maps)  # views side by side make maps wider
    fig, axes = pyplot.subplots(
        len(rows), len(columns), figsize=(1.7 * wide * len(columns) + 1.6, 1.7 * len(rows) + 0.9), squeeze=False
    )
    seen: dict[tuple, int] = {}
    image = None
    for entry in maps:
        key, size = row_key(entry), tuple(entry['size'])
        k = seen.get((key, size), 0)
        seen[(key, size)] = k + 1
        ax = axes[rows.index(key), columns.index((size, k))]
        scale = divisor[group_key(entry)]
        values = [[v / scale for v in row] for row in shown(entry)]
        image = ax.imshow(values, cmap='RdBu_r', vmin=-1, vmax=1, interpolation='nearest')
        r, c = entry['query']
        ax.plot([c], [r], marker='x', color='black', markersize=4)
        views = entry.get('views', 1)
        for v in range(1, views):  # the views side by side, view 1 on the left
            ax.axvline(v * size[1] - 0.5, color='black', linewidth=1.0)
        per_view = ' per view' if views > 1 else ''
        ax.set_title(f'{size[0]}x{size[1]}{per_view}, query ({r}, {c})', fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    for i, key in enumerate(rows):
        axes[i, 0].set_ylabel(row_label(key), fontsize=7)
    kinds = list(dict.fromkeys(m['kind'] for m in maps))
    grid = result['grid']
    head = title or f'position maps, training grid {grid[0]}x{grid[1]}'
    rigs = list(dict.fromkeys(m['rig'] for m in maps if m.get('rig')))
    if rigs:
        head += '\ncameras: ' + '; '.join(rigs) + '; query in view 1 (left), keys in both views'
    fig.suptitle(head, fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.88, 1 - 0.35 * (head.count('\n') + 1) / fig.get_figheight()))  # the title's room
    bar = fig.add_axes((0.9, 0.15, 0.02, 0.7))
    fig.colorbar(image, cax=bar).set_label('; '.join(f'{k}: {UNITS[k]}' for k in kinds), fontsize=7)
    try:  # laid out above: save_figure's tight layout would move the colour bar into the maps
        return outputs.save_figure(fig, path)
    finally:
        pyplot.close(fig)


__all__ = ['UNITS', 'plot_maps']
