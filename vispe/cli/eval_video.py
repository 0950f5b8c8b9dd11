"""``vispe eval-video CONFIG CKPT [--frames 4 8 16 32] [--sizes 16 24 32 48 64] [--strategy none ...]
[--time tubelets|clip] --out DIR`` (tools/eval_video.py is this command): a video checkpoint at other frame counts and
frame sizes (``vispe.sweeps.video``), into DIR/results.json and DIR/results.png as a resumable sweep."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence

from vispe.engine.config import common_parser_args, sweep_parser_args
from vispe.evaluation.report import console as report_console
from vispe.sweeps import engine
from vispe.sweeps import video as video_sweep
from vispe.sweeps.registry import finish_sweep


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=prog, description='Evaluate a video checkpoint at unseen frame counts and frame sizes'
    )
    common_parser_args(parser)
    sweep_parser_args(parser)
    engine.force_parser_args(parser)
    parser.add_argument('--frames', nargs='+', type=int, default=None, help='test frame counts (training size)')
    parser.add_argument('--sizes', nargs='+', type=int, default=None, help='test frame sizes in px (training frames)')
    parser.add_argument(
        '--strategy', nargs='+', default=None, help='resolution strategies (default: every one the model supports)'
    )
    parser.add_argument(
        '--time',
        choices=list(video_sweep.TIME_MODES),
        default='tubelets',
        help='how positions count time: tubelets (one step each, the default) or clip (the frame rate: more frames '
        'sit closer together)',
    )
    args = parser.parse_args(argv)
    console = report_console()
    sweep = functools.partial(video_sweep.evaluate_video, time=args.time)
    results = engine.sweep_for_tool(args, sweep, args.frames, args.sizes, args.strategy, log=console.print)
    name = os.path.basename(args.checkpoint)
    title = (
        f'{results["metric"]} (%) of {name}, trained on {results["train_frames"]} frames of '
        f'{results["train_resolution"]} px (time counted in {results["time"]})'
    )
    finish_sweep(
        console, video_sweep.results_table(results['results'], title=title, failed=results['failed']), results, args.out
    )


if __name__ == '__main__':
    main()
