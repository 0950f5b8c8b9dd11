"""Evaluate a video checkpoint at unseen frame counts and frame sizes:

python tools/eval_video.py CONFIG CKPT [--frames 4 8 16 32] [--sizes 16 24 32 48 64] [--strategy none ...]
    [--time tubelets|clip] --out DIR

Defaults: T/2 to 4T frames at the training size, 0.5x to 2x the frame size at the training frame count, every
strategy the model supports. Writes DIR/results.json as each cell finishes and DIR/results.png at the end, and prints
a table. A rerun into the same DIR reuses the finished cells (--force recomputes them).
(the same command as `vispe eval-video`: vispe/cli/eval_video.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.eval_video import main  # noqa: E402

if __name__ == '__main__':
    main()
