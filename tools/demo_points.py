"""The point-cloud demo (about 40 minutes on a 2-core CPU; not for CI): the tiny point transformer on primitives3d
with several encodings, tested at unseen point counts and object scales; writes outputs/demo_points/summary.*.

python tools/demo_points.py [--encodings point_mlp rope3d lff none rope3d_mixed]

The same command as `vispe demo-points` (vispe/cli/demo_points.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vispe.cli.demo_points import main  # noqa: E402

if __name__ == '__main__':
    main(default_out=os.path.join(ROOT, 'outputs', 'demo_points'))
