"""``vispe eval-cameras CONFIG CKPT [--settings train fov_wide views_4] --out DIR`` (tools/eval_cameras.py is this
command): a multi-view checkpoint at the camera settings named in the config's ``camera_eval.settings``, into
DIR/results.json and DIR/results.png as a resumable sweep."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vispe.engine.config import common_parser_args, sweep_parser_args
from vispe.evaluation.report import console as report_console
from vispe.sweeps import cameras as camera_sweep
from vispe.sweeps import engine
from vispe.sweeps.registry import finish_sweep


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=prog, description='Evaluate a multi-view checkpoint at unseen camera settings'
    )
    common_parser_args(parser)
    sweep_parser_args(parser)
    engine.force_parser_args(parser)
    parser.add_argument('--settings', nargs='+', default=None, help="names from the config's camera_eval.settings")
    args = parser.parse_args(argv)
    console = report_console()
    results = engine.sweep_for_tool(args, camera_sweep.evaluate_cameras, args.settings, log=console.print)
    title = f'{os.path.basename(args.checkpoint)}: 3D error / within {results["threshold"]:g} (%)'
    finish_sweep(
        console,
        camera_sweep.results_table(results['results'], title=title, failed=results['failed']),
        results,
        args.out,
    )


if __name__ == '__main__':
    main()
