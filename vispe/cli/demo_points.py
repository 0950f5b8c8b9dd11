"""vispe demo-points [--encodings point_mlp rope3d lff none rope3d_mixed] (tools/demo_points.py, `make demo-points`):
the point-cloud demo (about 40 minutes on a 2-core CPU; not for CI). Trains the tiny point transformer on
primitives3d with point_mlp, rope3d, lff and no encoding (about 10 minutes each), tests each at 1x / 2x / 4x the
training points and at 1x / 1.5x / 2x the object scale, and prints one table; writes outputs/demo_points/summary.md,
summary.json and summary.png.

Finished runs are reused and unfinished ones resume.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from vispe.cli.common import demo_parser, sweep_demo
from vispe.evaluation.outputs import forcing
from vispe.evaluation.report import console as report_console
from vispe.sweeps.points import evaluate_points, markdown_table, plot_results

#: label -> shipped config
CONFIGS = {
    'point_mlp': 'point/point_tiny_primitives3d.py',
    'rope3d': 'point/point_tiny_rope3d_primitives3d.py',
    'lff': 'point/point_tiny_lff_primitives3d.py',
    'none': 'point/point_tiny_none_primitives3d.py',
    'rope3d_mixed': 'point/point_tiny_rope3d_mixed_primitives3d.py',
}
DEFAULT = ['point_mlp', 'rope3d', 'lff', 'none']
CLOUDS = 'the 1000 primitives3d validation clouds'


def main(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    default_out: str = os.path.join('outputs', 'demo_points'),
) -> None:
    parser = demo_parser(prog, __doc__, default_out)
    parser.add_argument('--encodings', nargs='+', choices=list(CONFIGS), default=DEFAULT)
    args = parser.parse_args(argv)

    def summary(rows: list[dict]) -> tuple[str, str]:
        table = markdown_table(rows)
        return f'Top-1 accuracy (%) on {CLOUDS}; trained on 512 points at scale 1.\n\n{table}\n', table

    runs = ('primitives3d', CONFIGS, args.encodings)
    with forcing(args.force):
        sweep_demo(report_console(), runs, args.out, evaluate_points, plot_results, summary)


if __name__ == '__main__':
    main()
