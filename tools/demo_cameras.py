"""The camera-encoding demo (about 1.5 hours on a 2-core CPU; not for CI): train the tiny multi-view transformer on
multiview scenes with no camera information, plucker, petr, gta and gta with plucker (about 15 minutes each),
evaluate each at the training setting and at unseen ones (narrower and wider field of view, 48 px views, 3 and 4
views, farther cameras), and print the tables; writes outputs/demo_cameras/summary.md, summary.json, summary.png.

python tools/demo_cameras.py [--encodings none plucker petr gta gta+plucker]

Finished runs are reused and unfinished ones resume.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.config import load_config  # noqa: E402
from vispe.evaluation.camera_sweep import markdown_table, plot_results  # noqa: E402
from vispe.evaluation.compare import ROOT, sweep_runs, write_summary  # noqa: E402

#: label -> config
CONFIGS = {
    'none': 'configs/camera/multiview_tiny_scenes.py',
    'plucker': 'configs/camera/multiview_tiny_plucker_scenes.py',
    'petr': 'configs/camera/multiview_tiny_petr_scenes.py',
    'gta': 'configs/camera/multiview_tiny_gta_scenes.py',
    'gta+plucker': 'configs/camera/multiview_tiny_gta_plucker_scenes.py',
}
OUT = os.path.join(ROOT, 'outputs', 'demo_cameras')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--encodings', nargs='+', choices=list(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args()
    console = Console(width=160)
    log = lambda line: console.print(f'[bold]{line}[/bold]')  # noqa: E731
    start = time.time()
    rows = sweep_runs('multiview', CONFIGS, args.encodings, OUT, 'tools/eval_cameras.py', log)
    threshold = load_config(os.path.join(ROOT, CONFIGS[args.encodings[0]])).test_evaluator.threshold
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
    plot = write_summary(OUT, text, rows, plot_results)
    console.print(text)
    console.print(f'summary: {OUT}/summary.md; plot: {plot}')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
