"""Evaluate a multi-view checkpoint at camera settings it never saw (field of view, image size, views, distance):

python tools/eval_cameras.py CONFIG CKPT [--settings train fov_wide views_4] --out DIR

Settings are named in the config's ``camera_eval.settings`` (overrides of the test set). Writes DIR/results.json as
each setting finishes and DIR/results.png at the end, and prints a table of mean 3D error / share within the
threshold. A rerun into the same DIR reuses the finished settings (--force recomputes them); a DIR of another
checkpoint's or config's results is refused.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.config import common_parser_args, sweep_parser_args  # noqa: E402
from vispe.evaluation import camera_sweep as C  # noqa: E402
from vispe.evaluation import sweep_engine as E  # noqa: E402
from vispe.evaluation.report import describe  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Evaluate a multi-view checkpoint at unseen camera settings')
    common_parser_args(parser)
    sweep_parser_args(parser)
    E.force_parser_args(parser)
    parser.add_argument('--settings', nargs='+', default=None, help="names from the config's camera_eval.settings")
    args = parser.parse_args()
    console = Console(width=160)
    results = E.sweep_for_tool(args, C.sweep, args.settings, log=console.print)
    console.print(
        C.results_table(
            results['results'],
            title=f'{os.path.basename(args.checkpoint)}: 3D error / within {results["threshold"]:g} (%)',
            failed=results['failed'],
        )
    )
    png_path = C.plot_results(results['results'], os.path.join(args.out, 'results.png'), title=describe(results))
    console.print(f'results: {os.path.join(args.out, E.RESULTS)}\nplot: {png_path}')
    sys.exit(E.failure_message(results, args.out))


if __name__ == '__main__':
    main()
