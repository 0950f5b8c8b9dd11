"""Evaluate a checkpoint at several resolutions:

python tools/eval_resolution.py CONFIG CKPT --resolutions 32 48 64 [--strategy bicubic ...] --out DIR

Writes DIR/results.json as each (strategy, resolution) cell finishes and DIR/results.png at the end, and prints a
table. A rerun into the same DIR reuses the finished cells (--force recomputes them); a DIR holding another
checkpoint's or config's results is refused. A cell out of memory is retried at half the batch size, down to 1.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.config import common_parser_args, sweep_parser_args  # noqa: E402
from vispe.evaluation import resolution as R  # noqa: E402
from vispe.evaluation import sweep_engine as E  # noqa: E402
from vispe.evaluation.checkpoints import parse_resolution  # noqa: E402
from vispe.evaluation.report import describe  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Evaluate a vispe checkpoint at unseen resolutions')
    common_parser_args(parser)
    sweep_parser_args(parser)
    E.force_parser_args(parser)
    parser.add_argument(
        '--resolutions',
        nargs='+',
        type=parse_resolution,
        required=True,
        help='image sizes: 32 48 64, or HxW such as 48x64',
    )
    parser.add_argument(
        '--strategy',
        nargs='+',
        default=None,
        help="resolution strategies (default: every one the model's encodings support)",
    )
    args = parser.parse_args()
    console = Console()
    results = E.sweep_for_tool(args, R.sweep, args.resolutions, args.strategy, log=console.print)
    title = f'{results["metric"]} (%) of {os.path.basename(args.checkpoint)}, trained at {results["train_resolution"]}'
    console.print(R.results_table(results['results'], title=title, failed=results['failed']))
    png_path = R.plot_results(
        results['results'],
        os.path.join(args.out, 'results.png'),
        train_resolution=results['train_resolution'],
        title=describe(results),
    )
    console.print(f'results: {os.path.join(args.out, E.RESULTS)}\nplot: {png_path}')
    sys.exit(E.failure_message(results, args.out))


if __name__ == '__main__':
    main()
