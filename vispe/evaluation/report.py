"""Sweep results for people: rows (result dicts) -> a pivot (row keys x columns -> mean ± std over repeats) -> markdown,
JSON or a figure.

Rows in one cell are repeats, reported as their mean; a text cell (``'failed'``) keeps its text.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vispe.encodings.build import spec_text
from vispe.engine.run_meta import resolution_label
from vispe.evaluation import outputs

Row = Mapping[str, Any]
Key = tuple[Any, ...]


class Stat(NamedTuple):
    """A cell's mean, standard deviation (0 for one value) and count; equal to the tuple (mean, std, n)."""

    mean: float
    std: float
    n: int


def summarize(values: Sequence[float]) -> Stat:
    """The Stat of repeated values (seeds)."""
    values = list(values)
    return Stat(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


Cell = Stat | str
MISSING = Stat(float('nan'), 0.0, 0)
#: a table's text for a cell that did not fit in memory even at batch size 1 (results.json's ``failed``)
FAILED = 'failed'


@dataclass
class Pivot:
    """``cells[(row key, column)]``: a Stat or text; ``index`` names the row-key fields; ``keys`` and ``columns`` are in
    display order."""

    index: tuple[str, ...]
    keys: list[Key] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[Key, str], Cell] = field(default_factory=dict)

    def get(self, key: Key, column: str) -> Cell | None:
        return self.cells.get((key, column))

    def stat(self, key: Key, column: str) -> Stat:
        """The cell's Stat; MISSING (nan, no values) for an absent or a text cell."""
        cell = self.cells.get((key, column))
        return cell if isinstance(cell, Stat) else MISSING

    def line(self, key: Key) -> dict[str, Cell]:
        """{column: cell} of one row key, absent cells left out."""
        return {c: self.cells[(key, c)] for c in self.columns if (key, c) in self.cells}

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: each line's key fields and, per column, mean / std / n (or the cell's text)."""

        def cell(value: Cell) -> Any:
            return value if isinstance(value, str) else value._asdict()

        return {
            'index': list(self.index),
            'columns': list(self.columns),
            'rows': [
                {**dict(zip(self.index, key)), 'cells': {c: cell(v) for c, v in self.line(key).items()}}
                for key in self.keys
            ],
        }


def pivot(
    rows: Sequence[Row],
    index: Sequence[str],
    column: str | Callable[[Row], str],
    value: str = 'value',
    columns: Sequence[str] | None = None,
    order: Callable[[str], Any] | None = None,
) -> Pivot:
    """Pivot ``rows``: one line per distinct ``index`` fields, one column per ``column(row)``, in order of appearance.

    ``columns`` keeps only those, in that order; ``order`` sorts them. Repeats are summarized; text wins over numbers.
    """
    label = column if callable(column) else (lambda r: str(r[column]))
    values: dict[tuple[Key, str], list[Any]] = {}
    for r in rows:
        values.setdefault((tuple(r[i] for i in index), label(r)), []).append(r[value])
    found = list(dict.fromkeys(c for _, c in values))
    if columns is None:
        columns = sorted(found, key=order) if order else found
    else:
        columns = [str(c) for c in columns]
    table = Pivot(tuple(index), list(dict.fromkeys(k for k, _ in values)), list(columns))
    for (key, col), vs in values.items():
        if col in table.columns:
            texts = [v for v in vs if isinstance(v, str)]
            table.cells[(key, col)] = texts[-1] if texts else summarize(vs)
    return table


def key_text(key: Key) -> str:
    """A row key as one label: its fields joined by spaces (the figures' default legend entry)."""
    return ' '.join(str(k) for k in key)


def cell_text(cell: Cell | None, fmt: str, spread: bool = False, missing: str = '-') -> str:
    """A cell formatted with ``fmt``: 'mean ± std' when ``spread``, ``missing`` for no cell, a text cell's text."""
    if cell is None:
        return missing
    if isinstance(cell, str):
        return cell
    if spread and cell.n > 1:
        return f'{format(cell.mean, fmt)} ± {format(cell.std, fmt)}'
    return format(cell.mean, fmt)


#: the console width when the output is a file or a pipe: wide enough that rich never cuts a table's cells
#: ('rope_mi…'); rich pads no line, so text stays as long as it is
PIPE_WIDTH = 10_000


def console(file: Any = None):
    """rich's Console for a tool's report: the terminal's width, else ``PIPE_WIDTH`` (not rich's 80)."""
    from rich.console import Console

    out = file if file is not None else sys.stdout
    return Console(file=file) if out.isatty() else Console(file=file, width=PIPE_WIDTH)


def rich_table(table: Pivot, index_names: Sequence[str], title: str, fmt: str):
    """The pivot as a rich Table: one column per index field, one per pivot column, cells by ``cell_text``."""
    from rich.table import Table

    shown = Table(title=title)
    for name in index_names:
        shown.add_column(name)
    for column in table.columns:
        shown.add_column(column, justify='right')
    for key in table.keys:
        shown.add_row(*key, *[cell_text(table.get(key, c), fmt) for c in table.columns])
    return shown


def markdown(
    table: Pivot,
    fmt: str = '.1f',
    spread: bool = False,
    align: str = '',
    labels: Mapping[Key, Sequence[str]] | None = None,
) -> str:
    """A markdown table, missing cells 'nan'; ``align=':'`` right-aligns values, ``labels`` renames some lines."""
    labels = labels or {}
    lines = [
        '| ' + ' | '.join([*table.index, *table.columns]) + ' |',
        '|' + '---|' * len(table.index) + f'---{align}|' * len(table.columns),
    ]
    for key in table.keys:
        shown = [str(k) for k in labels.get(key, key)]
        texts = [cell_text(table.get(key, c), fmt, spread, missing=format(float('nan'), fmt)) for c in table.columns]
        lines.append('| ' + ' | '.join([*shown, *texts]) + ' |')
    return '\n'.join(lines)


def write_json(results: Mapping[str, Any], path: str, kind: str = 'summary', run: str | None = None) -> str:
    """Write ``results`` as indented JSON at ``path``, stamped as a ``kind`` report (``vispe.evaluation.outputs``);
    returns the path."""
    return outputs.write_json(path, results, kind, run)


# ------------------------------------------------------------------------------------------------------------------
# resolutions and titles
# ------------------------------------------------------------------------------------------------------------------


def resolution_order(label: str) -> tuple[int, int]:
    """Sort key of a resolution label: pixel count, then height (so 32x48 comes before 48x32)."""
    parts = [int(p) for p in label.lower().split('x')]
    h, w = parts if len(parts) == 2 else (parts[0], parts[0])
    return h * w, h


def _flat_get(config: Mapping[str, Any], prefix: str, name: str) -> Any:
    return config.get(f'{prefix}.{name}')


def _subtree(config: Mapping[str, Any], prefix: str) -> Any:
    """The value a flat config holds at ``prefix``, nested again; None when it holds nothing there."""
    if prefix in config:
        return config[prefix]
    tree: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith(prefix + '.'):
            node = tree
            *path, last = key[len(prefix) + 1 :].split('.')
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
    return _as_lists(tree) if tree else None


def _as_lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_as_lists(node[k]) for k in sorted(node, key=int)]
    return {k: _as_lists(v) for k, v in node.items()}


#: the backbone's shape as titles give it, (config key, word); it replaces a timm name that the config reshaped
SHAPE_WORDS = (('patch_size', 'patch'), ('embed_dim', 'width'), ('depth', 'depth'), ('num_heads', 'heads'))
#: a results.json ``resize`` in words, for titles
RESIZE_WORDS = {'crop': 'centre crop', 'pad': 'padding', 'stretch': 'stretching'}


def describe(results: Mapping[str, Any]) -> str:
    """'ViT (rope_mixed; patch 4, width 64, depth 4, heads 4) on Shapes2D, trained at 32 px, 6000 training samples'
    of a results.json, from the recorded training config (else the evaluated one); '' when it holds none. A timm
    name (vit_tiny_patch16_224) whose patch, width or depth the config changed is named by its family only."""
    config = results.get('trained_config') or results.get('resolved_config') or {}
    backbone = {k[len('model.backbone.') :]: v for k, v in config.items() if k.startswith('model.backbone.')}
    model = backbone.get('type') or backbone.get('model_name') or config.get('model.type')
    shape = ', '.join(f'{name} {backbone[key]}' for key, name in SHAPE_WORDS if key in backbone)
    if shape and model == backbone.get('model_name'):  # a timm name whose shape the config changed
        model = 'ViT' if str(model).startswith('vit_') else str(model).split('_')[0]
    spec = _subtree(config, 'model.backbone.encoding')
    try:
        encoding = spec_text(spec) if spec is not None else None
    except (TypeError, ValueError):  # a results file of another schema: its value as it stands
        encoding = str(spec)
    prefix = 'train_dataloader.dataset'
    while f'{prefix}.dataset.type' in config:
        prefix += '.dataset'
    data = _flat_get(config, prefix, 'type')
    parts = []
    if model:
        inside = '; '.join(str(p) for p in (encoding, shape) if p)
        parts.append(f'{model} ({inside})' if inside else str(model))
    if data:
        parts.append(f'on {data}')
    trained = []
    if results.get('train_sizes'):
        trained.append(f'trained on sizes {results["train_sizes"]}')
    elif results.get('train_resolution') is not None:
        trained.append(f'trained at {resolution_label(results["train_resolution"], collapse_square=True)} px')
    if results.get('resize'):  # how image files met sizes of other aspect ratios (resolution sweeps)
        trained.append(f'other aspect ratios by {RESIZE_WORDS.get(results["resize"], results["resize"])}')
    if results.get('train_points') is not None:
        trained.append(f'trained on {results["train_points"]} points')
    samples = next((_flat_get(config, prefix, k) for k in ('num_samples', 'length') if _flat_get(config, prefix, k)), 0)
    if samples:
        trained.append(f'{samples} training samples')
    return ', '.join([' '.join(parts), *trained] if parts else trained)


__all__ = [
    'PIPE_WIDTH',
    'console',
    'FAILED',
    'MISSING',
    'Pivot',
    'Stat',
    'cell_text',
    'describe',
    'key_text',
    'markdown',
    'pivot',
    'resolution_order',
    'summarize',
    'write_json',
]
