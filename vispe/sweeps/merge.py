"""Several runs' sweep results in one table (``vispe compare-results``), by the pivot each kind registered."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vispe.evaluation.report import Pivot, describe, pivot
from vispe.sweeps.registry import SWEEPS


class NotComparable(ValueError):
    """Results files that cannot be one table: not a sweep's results.json, or sweeps of different kinds."""


def sweep_kind(results: Any, name: str) -> str:
    """The kind of sweep a results.json holds, one of ``SWEEPS``; NotComparable naming ``name`` otherwise."""
    if not isinstance(results, Mapping) or not isinstance(results.get('results'), list):
        commands = ', '.join(f'vispe {kind.command}' for kind in SWEEPS.values())
        raise NotComparable(
            f'{name} is not a sweep results.json (no "results" list): pass the results.json that '
            f'an evaluation command writes ({commands})'
        )
    kind = results.get('sweep')
    if not isinstance(kind, str) or kind not in SWEEPS:
        known = ', '.join(SWEEPS)
        raise NotComparable(
            f'{name} has no known sweep kind ("sweep": {kind!r}; known: {known}): a results.json written by an older '
            'vispe has none, rerun its eval tool'
        )
    return kind


def merge(
    documents: Sequence[Mapping[str, Any]], labels: Sequence[str], metric: str | None = None
) -> tuple[str, Pivot, str]:
    """(kind, one pivot of every document's rows, each labelled by a first key field ``run``, the metric) for
    results.json documents of one kind.

    NotComparable names files of different kinds and those without results; an unfinished sweep's rows are labelled so.
    ``metric`` picks one where rows name their metric (default: the first).
    """
    kinds = [sweep_kind(d, label) for d, label in zip(documents, labels)]
    if len(set(kinds)) > 1:
        listed = ', '.join(f'{label} is a {kind} sweep' for label, kind in zip(labels, kinds))
        raise NotComparable(f'results of different kinds cannot be one table ({listed}): compare one kind at a time')
    kind, spec = kinds[0], SWEEPS[kinds[0]]
    check_same_data(documents, labels)
    labels = checked_labels(documents, labels)
    rows = [dict(r, run=label) for d, label in zip(documents, labels) for r in d['results']]
    if spec.row_metric is not None:  # rows of several metrics: one table holds one
        metrics = list(dict.fromkeys(r[spec.row_metric] for r in rows))
        if metric is None and metrics:
            metric = metrics[0]
        if metric is None or metric not in metrics:
            raise NotComparable(f'no rows of metric {metric!r}; these results hold {metrics}')
        rows = [r for r in rows if r[spec.row_metric] == metric]
    else:
        metric = metric or str(documents[0].get('metric', 'value'))
    return kind, pivot(rows, ('run', *spec.fields), spec.column, order=spec.order), metric


def data_of(document: Mapping[str, Any]) -> tuple[Any, ...]:
    """(type, data_root, task) of the innermost test data set a results.json was evaluated on."""
    config = document.get('resolved_config') or {}
    prefix = 'test_dataloader.dataset'
    while f'{prefix}.dataset.type' in config:
        prefix += '.dataset'
    return tuple(config.get(f'{prefix}.{key}') for key in ('type', 'data_root', 'task'))


def check_same_data(documents: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> None:
    """NotComparable for one run given twice, and for results on different data sets."""
    seen: dict[tuple, str] = {}
    for document, label in zip(documents, labels):
        key = tuple(document.get(k) for k in ('sweep', 'checkpoint_sha256', 'config_sha256'))
        if key[1] is not None and key in seen:
            raise NotComparable(f'{seen[key]} and {label} hold the results of one run (the same checkpoint, config and '
                                'sweep): give each run once')  # fmt: skip
        seen[key] = label
    data = {label: data_of(d) for d, label in zip(documents, labels)}
    if len(set(data.values())) > 1:
        shown = '; '.join(f'{label}: {" ".join(str(v) for v in values if v is not None) or "?"}'
                          for label, values in data.items())  # fmt: skip
        raise NotComparable(f'these results were evaluated on different data sets ({shown}): compare runs on one')


def non_strict(documents: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> list[str]:
    """The labels of runs evaluated from a non-strict load, which a comparison must say."""
    return [
        label for d, label in zip(documents, labels) if (d.get('resolved_config') or {}).get('load_strict') is False
    ]


def checked_labels(documents: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> list[str]:
    """The runs' labels, unfinished ones marked '(incomplete: ...)'; NotComparable naming runs with no results."""
    empty = [label for d, label in zip(documents, labels) if isinstance(d, Mapping) and d.get('results') == []]
    if empty:
        raise NotComparable(
            f'{", ".join(empty)} holds no results (an interrupted or failed sweep): finish it by running its eval '
            'tool again (it resumes), or leave the file out'
        )
    marked = []
    for d, label in zip(documents, labels):
        if isinstance(d, Mapping) and not d.get('complete', True):
            failed = len(d.get('failed') or [])
            why = f'{failed} failed cell{"s" * (failed != 1)}' if failed else 'interrupted'
            label = f'{label} (incomplete: {why})'
        marked.append(label)
    return marked


def run_labels(paths: Sequence[str]) -> list[str]:
    """Each results.json labelled by its last folder names, as many as make the labels unique; folder names that end
    every path alike (runs/a/eval, runs/b/eval) are left out: they tell the runs not apart."""
    parts = [os.path.abspath(p).split(os.sep)[:-1] for p in paths]
    while len(parts) > 1 and all(len(p) > 1 and p[-1] == parts[0][-1] for p in parts):
        parts = [p[:-1] for p in parts]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ['/'.join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(i) for i in range(len(paths))]


def merged_title(documents: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str:
    """One ``describe`` when every run says the same, else each run's, labelled."""
    said = [describe(d) for d in documents]
    if len(set(said)) == 1:
        return said[0]
    return '\n'.join(f'{label}: {text or "?"}' for label, text in zip(labels, said))


__all__ = [
    'NotComparable',
    'check_same_data',
    'checked_labels',
    'data_of',
    'merge',
    'merged_title',
    'non_strict',
    'run_labels',
    'sweep_kind',
]
