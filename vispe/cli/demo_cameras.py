"""vispe demo-cameras [--encodings none plucker petr gta gta+plucker prope prope+plucker 3dppe 3dppe_gt]
(tools/demo_cameras.py, `make demo-cameras`): the camera-encoding demo (about 2.5 hours on a 2-core CPU; not for
CI). Trains the tiny multi-view transformer on multiview scenes with no camera information, plucker, petr, gta, gta
with plucker, prope, prope with plucker and 3dppe with predicted and with rendered depth (15-25 minutes each),
evaluates each at the training setting and at unseen ones (narrower and wider field of view, 24 and 48 px views, 3,
4 and 8 views, farther cameras), and prints the tables; writes outputs/demo_cameras/summary.md, summary.json,
summary.png.

Finished runs are reused and unfinished ones resume.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from vispe.cli.common import demo_parser, sweep_demo
from vispe.engine.config import load_config
from vispe.evaluation.outputs import forcing
from vispe.evaluation.report import console as report_console
from vispe.sweeps.cameras import evaluate_cameras, markdown_table, plot_results

#: label -> shipped config
CONFIGS = {
    'none': 'camera/multiview_tiny_scenes.py',
    'plucker': 'camera/multiview_tiny_plucker_scenes.py',
    'petr': 'camera/multiview_tiny_petr_scenes.py',
    'gta': 'camera/multiview_tiny_gta_scenes.py',
    'gta+plucker': 'camera/multiview_tiny_gta_plucker_scenes.py',
    'prope': 'camera/multiview_tiny_prope_scenes.py',
    'prope+plucker': 'camera/multiview_tiny_prope_plucker_scenes.py',
    '3dppe': 'camera/multiview_tiny_3dppe_scenes.py',
    '3dppe_gt': 'camera/multiview_tiny_3dppe_gt_scenes.py',
}


def main(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    default_out: str = os.path.join('outputs', 'demo_cameras'),
) -> None:
    parser = demo_parser(prog, __doc__, default_out)
    parser.add_argument('--encodings', nargs='+', choices=list(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args(argv)

    def summary(rows: list[dict]) -> tuple[str, str]:
        threshold = load_config(CONFIGS[args.encodings[0]]).test_evaluator.threshold
        text = '\n'.join(
            [
                '### mean 3D error (scene units; objects are 0.4-0.9 across)',
                '',
                markdown_table(rows, 'mean_error', '.3f'),
                '',
                f'### share of scenes within {threshold:g} of the target (%)',
                '',
                markdown_table(rows, 'value', '.1f'),
                '',
            ]
        )
        return text, text

    runs = ('multiview', CONFIGS, args.encodings)
    with forcing(args.force):
        sweep_demo(report_console(), runs, args.out, evaluate_cameras, plot_results, summary)


if __name__ == '__main__':
    main()
