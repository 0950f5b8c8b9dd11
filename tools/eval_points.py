"""Evaluate a point-cloud checkpoint at unseen point counts and object scales:

python tools/eval_points.py CONFIG CKPT [--points 512 1024 2048] [--scales 1 1.5 2] --out DIR

Defaults come from the config's ``point_eval`` (1x / 2x / 4x the training points, scales 1 / 1.5 / 2). Writes
DIR/results.json as each cell finishes and DIR/results.png at the end, and prints a table. A rerun into the same DIR
reuses the finished cells (--force recomputes them); a DIR of another checkpoint's or config's results is refused.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.config import common_parser_args, sweep_parser_args  # noqa: E402
from vispe.evaluation import point_sweep as P  # noqa: E402
from vispe.evaluation import sweep_engine as E  # noqa: E402
from vispe.evaluation.report import describe  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Evaluate a point-cloud checkpoint at unseen point counts and scales')
    common_parser_args(parser)
    sweep_parser_args(parser)
    E.force_parser_args(parser)
    parser.add_argument('--points', nargs='+', type=int, default=None, help='test point counts')
    parser.add_argument('--scales', nargs='+', type=float, default=None, help='test object scales (training: 1)')
    args = parser.parse_args()
    console = Console()
    results = E.sweep_for_tool(args, P.sweep, args.points, args.scales, log=console.print)
    name = os.path.basename(args.checkpoint)
    title = f'{results["metric"]} (%) of {name}, trained on {results["train_points"]} points at scale 1'
    console.print(P.results_table(results['results'], title=title, failed=results['failed']))
    png_path = P.plot_results(results['results'], os.path.join(args.out, 'results.png'), title=describe(results))
    console.print(f'results: {os.path.join(args.out, E.RESULTS)}\nplot: {png_path}')
    sys.exit(E.failure_message(results, args.out))


if __name__ == '__main__':
    main()
