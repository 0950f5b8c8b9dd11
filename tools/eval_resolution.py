"""Evaluate a checkpoint at several resolutions:

python tools/eval_resolution.py CONFIG CKPT --resolutions 32 48 64 [--strategy bicubic ...] --out DIR

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
