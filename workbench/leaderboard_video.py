"""``python tools/leaderboard_video.py [--encodings ...] [--tasks direction] [--seeds 0 1 2] [--epochs N] [--jobs 2]
[--out outputs/leaderboard_video] [--archive DIR] [--no-train]`` (``make leaderboard-video``, ``python -m
workbench.leaderboard_video``): the video block of the leaderboard (several CPU-hours for the full board; not for
CI).

Trains the tiny space-time ViT on ShapesVideo for each encoding, task and seed (finished runs are reused, unfinished
ones resume), sweeps each at T/2 to 4T frames and 0.5x to 2x the frame size under every strategy, and writes
OUT/leaderboard.md (per task, each encoding's plain and best strategy, mean ± std over seeds), OUT/leaderboard.json
(the statistics) and OUT/leaderboard.png. With ``--archive DIR`` each finished run's results are kept in DIR too,
and a run found there is read instead of trained (``video_board.VideoArchive``). ``--no-train`` tables what is
finished or archived (a board built in slices).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from vispe.cli.common import demo_parser
from vispe.datasets.shapes_video import TASKS
from vispe.evaluation import outputs
from vispe.evaluation.report import console as report_console
from workbench import video_board as V

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the checkout's folders for the outputs and the archive of runs (committed: the runs behind the docs' tables)
CHECKOUT = {
    'default_out': os.path.join(ROOT, 'outputs', 'leaderboard_video'),
    'default_archive': os.path.join(ROOT, 'results', 'leaderboard_video'),
}


def main(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    default_out: str = os.path.join('outputs', 'leaderboard_video'),
    default_archive: str = '',
) -> None:
    parser = demo_parser(prog, __doc__, default_out)
    parser.add_argument('--encodings', nargs='+', default=list(V.DEFAULT_ENCODINGS), help='video encoding specs')
    parser.add_argument('--tasks', nargs='+', choices=sorted(TASKS), default=['direction'], help='ShapesVideo tasks')
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--epochs', type=int, default=None, help="training epochs (default: the config's)")
    parser.add_argument('--jobs', type=int, default=1, help='runs trained at once, each in its own process')
    parser.add_argument(
        '--archive',
        default=default_archive,
        help="keep each finished run's results in this folder and read the runs found there instead of training "
        "them ('' = none; a checkout's tools/leaderboard_video.py: results/leaderboard_video)",
    )
    parser.add_argument('--no-train', action='store_true', help='table the finished or archived runs only')
    args = parser.parse_args(argv)
    console = report_console()
    with outputs.forcing(args.force):
        for name, kind in (
            ('leaderboard.md', 'summary'),
            ('leaderboard.json', 'summary'),
            ('leaderboard.png', 'figure'),
        ):
            outputs.check_target(os.path.join(args.out, name), kind)  # before anything trains
        stats, columns = V.board(
            args.tasks,
            args.encodings,
            args.seeds,
            args.out,
            args.epochs,
            args.jobs,
            not args.no_train,
            console.print,
            args.archive,
        )
        text = V.board_markdown(stats, args.tasks, columns)
        outputs.write_text(os.path.join(args.out, 'leaderboard.md'), text, 'summary')
        outputs.write_json(os.path.join(args.out, 'leaderboard.json'), {'results': V.board_rows(stats)}, 'summary')
        tasks = [t for t in args.tasks if any(key[0] == t for key in stats)]
        plot = V.plot(stats, tasks, columns, os.path.join(args.out, 'leaderboard.png'))
    console.print(text)
    console.print(f'tables: {args.out}/leaderboard.md; plot: {plot}')


if __name__ == '__main__':
    main()

if __name__ == '__main__':
    main(**CHECKOUT)
