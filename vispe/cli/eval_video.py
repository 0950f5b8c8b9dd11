"""``vispe eval-video CONFIG CKPT [--frames 4 8 16 32] [--sizes 16 24 32 48 64] [--strategy none ...]
[--time tubelets|clip] --out DIR`` (tools/eval_video.py is this command)

Without --frames and --sizes it sweeps T/2, T, 2T and 4T frames at the training frame size, and 0.5x, 0.75x, 1x,
1.5x and 2x the frame size at the training frame count (rounded to the tubelet and the patch), under every strategy
the model's encodings support. ``--time clip`` tells the model each clip's frame rate (positions at T_train / T
apart) instead of counting tubelets (``vispe.sweeps.video``).

Writes DIR/results.json as each cell finishes and DIR/results.png at the end, and prints a table. A rerun into the
same DIR reuses the finished cells (--force recomputes them); a DIR of another checkpoint's or config's results is
refused.
"""

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
