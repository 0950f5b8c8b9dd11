"""Evaluate a checkpoint at several resolutions:

python tools/eval_resolution.py CONFIG CKPT [--resolutions 16 32 64 32x64 64x32] [--strategy none ...] --out DIR

Without --resolutions: 0.5x, 0.75x, 1x, 1.5x, 2x, 3x the training size and 2:1, 1:2 at its token count.

Writes DIR/results.json as each (strategy, resolution) cell finishes and DIR/results.png at the end, and prints a
table. A rerun into the same DIR reuses the finished cells (--force recomputes them); a DIR holding another
checkpoint's or config's results is refused. A cell out of memory is retried at half the batch size, down to 1.
(the same command as `vispe eval-resolution`: vispe/cli/eval_resolution.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.eval_resolution import main  # noqa: E402

if __name__ == '__main__':
    main()
