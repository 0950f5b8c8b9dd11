"""``vispe compare --tasks position relation --encodings ape_learned rope_mixed irpe+ape_learned [--epochs 30]
[--resolutions 32 48 64] [--out outputs/compare]`` (tools/compare_encodings.py is this command): encodings trained on
shapes2d tasks with one schedule and seed, then evaluated at the resolutions (finished runs reused); a markdown table
per task, OUT/summary.json and OUT/summary_<task>.png."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vispe.engine.workdir import out_folder
from vispe.evaluation.outputs import check_target, forcing
from vispe.experiments.compare import (
    SHAPES2D_TASK_CONFIGS,
    Run,
    compare,
    encoding_option,
    markdown_table,
    schedule_options,
)


def main(
    argv: Sequence[str] | None = None, prog: str | None = None, default_out: str = os.path.join('outputs', 'compare')
) -> None:
    parser = argparse.ArgumentParser(prog=prog, description='Compare positional encodings on shapes2d')
    parser.add_argument('--tasks', nargs='+', default=['position'], choices=sorted(SHAPES2D_TASK_CONFIGS))
    parser.add_argument('--encodings', nargs='+', required=True, help="names; 'a+b' combines encodings")
    parser.add_argument('--epochs', type=int, default=None, help='override the schedule length (all runs alike)')
    parser.add_argument('--resolutions', nargs='+', default=['32', '48', '64'])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out', type=out_folder, default=default_out)
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace summary files in OUT that vispe did not write (never other formats)',
    )
    args = parser.parse_args(argv)
    with forcing(args.force):  # OUT/summary.json and the plots are checked before anything is trained
        check_target(os.path.join(args.out, 'summary.json'), 'summary')
        for task in args.tasks:
            check_target(os.path.join(args.out, f'summary_{task}.png'), 'figure')
    runs = [
        Run(
            task,
            SHAPES2D_TASK_CONFIGS[task],
            os.path.join(args.out, task, enc),
            [encoding_option(enc), f'randomness.seed={args.seed}', *schedule_options(args.epochs)],
        )
        for task in args.tasks
        for enc in args.encodings
    ]
    with forcing(args.force):
        summary = compare(runs, args.resolutions, args.out)
    for task, entry in summary['tasks'].items():
        print(f'\n### shapes2d {task}: top-1 accuracy (%), trained at {entry["train_resolution"]}\n')
        print(markdown_table(entry['results'], args.resolutions))
    print(f'\nsummary: {summary["json"]}\nplots: {", ".join(summary["plots"])}')


if __name__ == '__main__':
    main()
