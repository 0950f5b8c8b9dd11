"""Evaluate a point-cloud checkpoint at unseen point counts and object scales:

python tools/eval_points.py CONFIG CKPT [--points 512 1024 2048] [--scales 1 1.5 2] --out DIR

Defaults come from the config's ``point_eval`` (1x / 2x / 4x the training points, scales 1 / 1.5 / 2). Writes
DIR/results.json as each cell finishes and DIR/results.png at the end, and prints a table. A rerun into the same DIR
reuses the finished cells (--force recomputes them); a DIR of another checkpoint's or config's results is refused.
(the same command as `vispe eval-points`: vispe/cli/eval_points.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.eval_points import main  # noqa: E402

if __name__ == '__main__':
    main()
