"""Evaluate a multi-view checkpoint at camera settings it never saw (field of view, image size, views, distance):

python tools/eval_cameras.py CONFIG CKPT [--settings train fov_wide views_4] --out DIR

Settings are named in the config's ``camera_eval.settings`` (overrides of the test set). Writes DIR/results.json and
DIR/results.png and prints a table of mean 3D error / share within the threshold.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.checkpoint import CheckpointError  # noqa: E402
from vispe.engine.config import ConfigError, common_parser_args, load_config, sweep_parser_args  # noqa: E402
from vispe.evaluation import camera_sweep as C  # noqa: E402
from vispe.evaluation.resolution import write_json  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Evaluate a multi-view checkpoint at unseen camera settings')
    common_parser_args(parser)
    sweep_parser_args(parser)
    parser.add_argument('--settings', nargs='+', default=None, help="names from the config's camera_eval.settings")
    args = parser.parse_args()
    try:
        cfg = load_config(args.config, args.cfg_options)
        results = C.sweep(cfg, args.checkpoint, args.settings, args.device, show_progress=not args.no_progress)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
    console = Console(width=160)
    console.print(
        C.results_table(
            results['results'],
            title=f'{os.path.basename(args.checkpoint)}: 3D error / within {results["threshold"]:g} (%)',
        )
    )
    json_path = write_json(results, os.path.join(args.out, 'results.json'))
    png_path = C.plot_results(results['results'], os.path.join(args.out, 'results.png'))
    console.print(f'results: {json_path}\nplot: {png_path}')


if __name__ == '__main__':
    main()
