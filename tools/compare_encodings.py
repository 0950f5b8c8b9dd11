"""Compare encodings on shapes2d tasks at several resolutions, same schedule and seed for every encoding:

python tools/compare_encodings.py --tasks position relation --encodings ape_learned rope_mixed irpe+ape_learned \\
    [--epochs 30] [--resolutions 32 48 64] [--out outputs/compare]

Each run is trained, then evaluated at the resolutions; finished runs are reused. Prints a markdown table per
task and writes OUT/summary.json and OUT/summary_<task>.png.

The same command as `vispe compare` (vispe/cli/compare_encodings.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vispe.cli.compare_encodings import main  # noqa: E402

if __name__ == '__main__':
    main(default_out=os.path.join(ROOT, 'outputs', 'compare'))
