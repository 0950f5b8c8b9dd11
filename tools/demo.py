"""The README's demo: train three tiny ViTs on shapes2d `position` (ape_learned, rope_axial, rope_mixed), evaluate
each at 1x, 1.5x and 2x the training resolution, print the table and what it shows; writes outputs/demo/summary.json,
summary.md and summary_position.png (--full: 30 epochs and every strategy, into outputs/demo-full).

A second run reuses finished checkpoints (delete outputs/demo to retrain) and resumes unfinished ones.

The same command as `vispe demo` (vispe/cli/demo.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vispe.cli.demo import main  # noqa: E402

if __name__ == '__main__':
    main(default_out=os.path.join(ROOT, 'outputs', 'demo'))
