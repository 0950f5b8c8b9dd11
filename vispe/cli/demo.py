"""vispe demo (tools/demo.py, `make demo`): the README's demo. Trains three tiny ViTs on shapes2d `position`
(ape_learned, rope_axial, rope_mixed), evaluates each at 1x, 1.5x and 2x the training resolution, and prints one
comparison table; writes outputs/demo/summary.json and summary_position.png.

A second run reuses finished checkpoints (delete outputs/demo to retrain) and resumes unfinished ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from vispe.cli.common import bold_log, demo_parser
from vispe.evaluation.report import console as report_console
from vispe.experiments.compare import Run, compare
from vispe.sweeps.resolution import results_table

ENCODINGS = ['ape_learned', 'rope_axial', 'rope_mixed']
RESOLUTIONS = ['32', '48', '64']  # 1x, 1.5x, 2x the training resolution


def main(
    argv: Sequence[str] | None = None, prog: str | None = None, default_out: str = os.path.join('outputs', 'demo')
) -> None:
    parser = demo_parser(prog, __doc__, default_out)
    out = parser.parse_args(argv).out
    console = report_console()
    start = time.time()
    runs = [Run('position', f'vit/vit_tiny_{enc}_shapes2d_position.py', os.path.join(out, enc)) for enc in ENCODINGS]
    summary = compare(runs, RESOLUTIONS, out, log=bold_log(console))
    title = 'shapes2d position: top-1 accuracy (%) by test resolution (trained at 32)'
    console.print(results_table(summary['tasks']['position']['results'], title=title))
    console.print(f'summary: {summary["json"]}\nplot: {summary["plots"][0]}')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
