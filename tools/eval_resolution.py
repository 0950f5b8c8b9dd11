"""Evaluate a checkpoint at several resolutions:

python tools/eval_resolution.py CONFIG CKPT --resolutions 32 48 64 [--strategy bicubic ...] --out DIR

Writes DIR/results.json and DIR/results.png and prints a table.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.checkpoint import CheckpointError  # noqa: E402
from vispe.engine.config import ConfigError, common_parser_args, load_config, sweep_parser_args  # noqa: E402
from vispe.evaluation import resolution as R  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Evaluate a vispe checkpoint at unseen resolutions')
    common_parser_args(parser)
    sweep_parser_args(parser)
    parser.add_argument(
        '--resolutions',
        nargs='+',
        type=R.parse_resolution,
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
    try:
        cfg = load_config(args.config, args.cfg_options)
        results = R.sweep(
            cfg, args.checkpoint, args.resolutions, args.strategy, args.device, show_progress=not args.no_progress
        )
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
    console = Console()
    title = f'{results["metric"]} (%) of {os.path.basename(args.checkpoint)}, trained at {results["train_resolution"]}'
    console.print(R.results_table(results['results'], title=title))
    json_path = R.write_json(results, os.path.join(args.out, 'results.json'))
    png_path = R.plot_results(
        results['results'], os.path.join(args.out, 'results.png'), train_resolution=results['train_resolution']
    )
    console.print(f'results: {json_path}\nplot: {png_path}')


if __name__ == '__main__':
    main()
