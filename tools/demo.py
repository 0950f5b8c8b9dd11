"""The README's demo: train three tiny ViTs on shapes2d `position` (ape_learned, rope_axial, rope_mixed) with
tools/train.py, evaluate each at 1x, 1.5x and 2x the training resolution with tools/eval_resolution.py, and
print one comparison table; writes outputs/demo/summary.json and summary_position.png.

A second run reuses finished checkpoints (delete outputs/demo to retrain) and resumes unfinished ones.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.evaluation.compare import ROOT, Run, compare  # noqa: E402
from vispe.evaluation.resolution import results_table  # noqa: E402

ENCODINGS = ['ape_learned', 'rope_axial', 'rope_mixed']
RESOLUTIONS = ['32', '48', '64']  # 1x, 1.5x, 2x the training resolution
OUT = os.path.join(ROOT, 'outputs', 'demo')


def main():
    console = Console()
    start = time.time()
    runs = [
        Run('position', f'configs/vit/vit_tiny_{enc}_shapes2d_position.py', os.path.join(OUT, enc)) for enc in ENCODINGS
    ]
    summary = compare(runs, RESOLUTIONS, OUT, log=lambda line: console.print(f'[bold]{line}[/bold]'))
    title = 'shapes2d position: top-1 accuracy (%) by test resolution (trained at 32)'
    console.print(results_table(summary['tasks']['position']['results'], title=title))
    console.print(f'summary: {summary["json"]}\nplot: {summary["plots"][0]}')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
