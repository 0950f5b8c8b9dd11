"""Evaluate a multi-view checkpoint at camera settings it never saw (field of view, image size, views, distance):

python tools/eval_cameras.py CONFIG CKPT [--settings train fov_wide views_4] --out DIR

Settings are named in the config's ``camera_eval.settings`` (overrides of the test set). Writes DIR/results.json as
each setting finishes and DIR/results.png at the end, and prints a table of mean 3D error / share within the
threshold. A rerun into the same DIR reuses the finished settings (--force recomputes them); a DIR of another
checkpoint's or config's results is refused.
(the same command as `vispe eval-cameras`: vispe/cli/eval_cameras.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.eval_cameras import main  # noqa: E402

if __name__ == '__main__':
    main()
