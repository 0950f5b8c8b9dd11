"""The point-cloud demo (about 40 minutes on a 2-core CPU; not for CI): train the tiny point transformer on
primitives3d with point_mlp, rope3d, lff and no encoding (about 10 minutes each), test each at 1x / 2x / 4x the
training points and at 1x / 1.5x / 2x the object scale, and print one table; writes outputs/demo_points/summary.md,
summary.json and summary.png.

python tools/demo_points.py [--encodings point_mlp rope3d lff none rope3d_mixed]

Finished runs are reused and unfinished ones resume.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.evaluation.compare import ROOT, sweep_runs, write_summary  # noqa: E402
from vispe.evaluation.point_sweep import markdown_table, plot_results  # noqa: E402

#: label -> config
CONFIGS = {
    'point_mlp': 'configs/point/point_tiny_primitives3d.py',
    'rope3d': 'configs/point/point_tiny_rope3d_primitives3d.py',
    'lff': 'configs/point/point_tiny_lff_primitives3d.py',
    'none': 'configs/point/point_tiny_none_primitives3d.py',
    'rope3d_mixed': 'configs/point/point_tiny_rope3d_mixed_primitives3d.py',
}
DEFAULT = ['point_mlp', 'rope3d', 'lff', 'none']
CLOUDS = 'the 1000 primitives3d validation clouds'
OUT = os.path.join(ROOT, 'outputs', 'demo_points')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--encodings', nargs='+', choices=list(CONFIGS), default=DEFAULT)
    args = parser.parse_args()
    console = Console()
    log = lambda line: console.print(f'[bold]{line}[/bold]')  # noqa: E731
    start = time.time()
    rows = sweep_runs('primitives3d', CONFIGS, args.encodings, OUT, 'tools/eval_points.py', log)
    table = markdown_table(rows)
    text = f'Top-1 accuracy (%) on {CLOUDS}; trained on 512 points at scale 1.\n\n{table}\n'
    plot = write_summary(OUT, text, rows, plot_results)
    console.print(table)
    console.print(f'summary: {OUT}/summary.md; plot: {plot}')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
