"""The camera-encoding demo (about 1.5 hours on a 2-core CPU; not for CI): the tiny multi-view transformer with
several camera encodings, evaluated at unseen camera settings; writes outputs/demo_cameras/summary.*.

python tools/demo_cameras.py [--encodings none plucker petr gta gta+plucker]

The same command as `vispe demo-cameras` (vispe/cli/demo_cameras.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vispe.cli.demo_cameras import main  # noqa: E402

if __name__ == '__main__':
    main(default_out=os.path.join(ROOT, 'outputs', 'demo_cameras'))
