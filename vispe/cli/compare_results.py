"""``vispe compare-results A/eval/results.json B/eval/results.json [--labels a b] --out DIR [--metric fd]``
(tools/compare_results.py is this command): several runs' results of one sweep kind merged into DIR/comparison.md
(printed), comparison.json and comparison.png. Runs are labelled by their folders (or --labels); results of another
kind, or not a sweep's, are refused; an unfinished sweep is labelled '(incomplete: ...)', an empty one refused."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from vispe.engine.atomic import DiskFullError
from vispe.engine.workdir import out_folder
from vispe.evaluation import figures, outputs, report
from vispe.sweeps import merge
from vispe.sweeps.registry import SWEEPS


def load(path: str):
    """The JSON of ``path``; NotComparable (not a traceback) for a file that is missing or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise merge.NotComparable(f'{path} is not a readable results.json: {err}') from None


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> str:
    parser = argparse.ArgumentParser(
        prog=prog, description="Merge several runs' results.json into one table and one figure"
    )
    parser.add_argument('results', nargs='+', help='results.json files of sweeps of one kind')
    parser.add_argument('--out', type=out_folder, required=True, help='folder for comparison.md / .json / .png')
    parser.add_argument('--labels', nargs='+', help='one label per results file (default: its folder name)')
    parser.add_argument('--metric', help="a generation sweep's metric (default: its first)")
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace comparison files in OUT that another comparison wrote or vispe did not write (a file of '
        'another format is never written over)',
    )
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.results):
        parser.error(f'--labels gives {len(args.labels)} labels for {len(args.results)} results files')
    twice = sorted(
        {p for p in args.results if [os.path.realpath(q) for q in args.results].count(os.path.realpath(p)) > 1}
    )
    if twice:
        parser.exit(2, f'compare_results: {", ".join(twice)} given twice: give each results file once\n')
    labels = args.labels or merge.run_labels(args.results)
    try:
        documents = [load(p) for p in args.results]
        kind, table, metric = merge.merge(documents, labels, args.metric)
    except merge.NotComparable as err:
        parser.exit(2, f'compare_results: {err}\n')
    for label in merge.non_strict(documents, labels):
        print(f'note: {label} was evaluated from a non-strict load (--non-strict): some of its weights kept their '
              'initial values', file=sys.stderr)  # fmt: skip
    text = report.markdown(table, '.1f')
    sources = dict(zip(labels, map(os.path.abspath, args.results)))
    run = outputs.run_id({'sources': sources, 'metric': metric})  # a comparison of the same files is this one
    targets = {name: os.path.join(args.out, f'comparison.{name}') for name in ('md', 'json', 'png')}
    try:
        with outputs.forcing(args.force):
            outputs.check_target(targets['json'], 'comparison', run)  # every file checked before any is written
            outputs.check_target(targets['md'], 'comparison')
            outputs.check_target(targets['png'], 'figure')
            outputs.write_text(targets['md'], text + '\n', 'comparison')
            doc = {'sweep': kind, 'metric': metric, 'sources': sources, **table.to_json()}
            outputs.write_json(targets['json'], doc, 'comparison', run)
            png = plot(args, table, documents, labels, kind, metric)
    except (outputs.OutputConflict, DiskFullError) as err:
        parser.exit(2, f'compare_results: error: {err}\n')
    print(text)
    print(f'table: {targets["md"]}\nplot: {png}')
    return png


def plot(args, table, documents, labels, kind, metric) -> str:
    return figures.plot_lines(
        table,
        os.path.join(args.out, 'comparison.png'),
        title=merge.merged_title(documents, labels),
        xlabel=SWEEPS[kind].xlabel,
        ylabel=f'{metric} (%)' if metric == 'accuracy' else metric,
        label=line_label,
        chance=common_chance(documents, metric),
    )


def line_label(key: tuple) -> str:
    """A legend entry: the key's fields, leaving out 'default' and a field the run's label already says
    ('rope_mixed none' for the run rope_mixed, not 'rope_mixed rope_mixed none')."""
    run, *rest = (str(k) for k in key)
    said = set(run.replace('/', ' ').split())
    return ' '.join([run, *(k for k in rest if k != 'default' and k not in said)])


def common_chance(documents, metric: str) -> float | None:
    """The runs' chance level when they all have the same one, else None."""
    levels = {figures.chance_level(d, metric) for d in documents}
    return levels.pop() if len(levels) == 1 else None
