"""The DiT demo (about 1.5 hours on a 2-core CPU; not for CI): DiT-Ti/4 on shapes2d 'shape_color' with four
encodings, sampled at 1x, 1.5x and 2x the training resolution; writes outputs/demo_dit/summary.*, samples.png.

python tools/demo_dit.py [--samples-per-class 4]

The same command as `vispe demo-dit` (vispe/cli/demo_dit.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vispe.cli.demo_dit import main  # noqa: E402

if __name__ == '__main__':
    main(default_out=os.path.join(ROOT, 'outputs', 'demo_dit'), zoo_root=ROOT)
