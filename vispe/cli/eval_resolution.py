"""``vispe eval-resolution CONFIG CKPT [--resolutions 16 24 32 48 64 96 32x64 64x32] [--strategy none ...] --out DIR``
(tools/eval_resolution.py is this command): a checkpoint at other resolutions (by default
``vispe.evaluation.trained_model.default_resolutions``) under each strategy, into DIR/results.json and
DIR/results.png as a resumable sweep."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence

from vispe.datasets.augment import RESIZE_MODES
from vispe.engine.config import common_parser_args, sweep_parser_args
from vispe.evaluation.report import console as report_console
from vispe.evaluation.report import describe
from vispe.evaluation.trained_model import parse_resolution
from vispe.sweeps import engine
from vispe.sweeps import resolution as resolution_sweep
from vispe.sweeps.registry import finish_sweep


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description='Evaluate a vispe checkpoint at unseen resolutions')
    common_parser_args(parser)
    sweep_parser_args(parser)
    engine.force_parser_args(parser)
    parser.add_argument(
        '--resolutions',
        nargs='+',
        type=parse_resolution,
        default=None,
        help='image sizes: 32 48 64, or HxW (height x width) such as 32x64; default: 0.5x, 0.75x, 1x, 1.5x, 2x, 3x '
        'the training size and 2:1, 1:2 at its token count',
    )
    parser.add_argument(
        '--strategy',
        nargs='+',
        default=None,
        help="resolution strategies (default: every one the model's encodings support; each cell switches the "
        "model's encodings to its strategy, whatever the config's encoding strategy= says)",
    )
    parser.add_argument(
        '--resize',
        choices=list(RESIZE_MODES),
        default=None,
        help='test sets of image files: how an image meets a size of another aspect ratio: crop (default: scaled to '
        'cover it, the centre cut out), pad (scaled to fit, padded with the mean colour) or stretch (each side '
        'scaled on its own); recorded in results.json and the table title',
    )
    args = parser.parse_args(argv)
    console = report_console()
    sweep = functools.partial(resolution_sweep.evaluate_resolution, resize=args.resize)
    results = engine.sweep_for_tool(args, sweep, args.resolutions, args.strategy, log=console.print)
    title = f'{results["metric"]} (%) of {os.path.basename(args.checkpoint)}: {describe(results)}'
    finish_sweep(
        console,
        resolution_sweep.results_table(results['results'], title=title, failed=results['failed']),
        results,
        args.out,
    )


if __name__ == '__main__':
    main()
