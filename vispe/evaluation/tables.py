"""Sweep results as tables: rows of result dicts pivoted to one line per encoding and one column per setting."""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Sequence

Row = Mapping[str, Any]


def by_encoding(rows: Sequence[Row], column: Callable[[Row], str], key: str = 'value') -> Dict[str, Dict[str, Any]]:
    """{encoding: {column(row): row[key]}}, encodings in the order they first appear."""
    cells: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        cells.setdefault(r['encoding'], {})[column(r)] = r[key]
    return cells


def markdown(cells: Mapping[str, Mapping[str, float]], columns: Sequence[str], fmt: str) -> str:
    """A markdown table of ``by_encoding`` cells: one line per encoding, the values formatted with ``fmt`` (nan where
    a setting is missing)."""
    lines = ['| encoding | ' + ' | '.join(columns) + ' |', '|---|' + '---:|' * len(columns)]
    for enc, values in cells.items():
        lines.append(f'| {enc} | ' + ' | '.join(format(values.get(c, float('nan')), fmt) for c in columns) + ' |')
    return '\n'.join(lines)


__all__ = ['by_encoding', 'markdown']
