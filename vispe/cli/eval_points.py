"""``vispe eval-points CONFIG CKPT [--points 512 1024 2048] [--scales 1 1.5 2] --out DIR`` (tools/eval_points.py is
this command): a point checkpoint at other point counts and scales (defaults: the config's ``point_eval``), into
DIR/results.json and DIR/results.png as a resumable sweep."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vispe.engine.config import common_parser_args, sweep_parser_args
from vispe.evaluation.report import console as report_console
from vispe.sweeps import engine
from vispe.sweeps import points as point_sweep
from vispe.sweeps.registry import finish_sweep


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=prog, description='Evaluate a point-cloud checkpoint at unseen point counts and scales'
    )
    common_parser_args(parser)
    sweep_parser_args(parser)
    engine.force_parser_args(parser)
    parser.add_argument('--points', nargs='+', type=int, default=None, help='test point counts')
    parser.add_argument('--scales', nargs='+', type=float, default=None, help='test object scales (training: 1)')
    args = parser.parse_args(argv)
    console = report_console()
    results = engine.sweep_for_tool(args, point_sweep.evaluate_points, args.points, args.scales, log=console.print)
    name = os.path.basename(args.checkpoint)
    title = f'{results["metric"]} (%) of {name}, trained on {results["train_points"]} points at scale 1'
    finish_sweep(
        console, point_sweep.results_table(results['results'], title=title, failed=results['failed']), results, args.out
    )


if __name__ == '__main__':
    main()
