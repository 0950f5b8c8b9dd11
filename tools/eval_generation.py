"""Sample a diffusion checkpoint at several resolutions and score the samples offline:

python tools/eval_generation.py CONFIG CKPT --resolutions 32 48 64 --samples-per-class 8 [--strategy none yarn ...] \\
    --out DIR [--classifier-checkpoint PTH | --no-fd]

Writes DIR/results.json (eval_resolution's schema, one row per metric) and DIR/samples_<strategy>_<res>.png as each
(strategy, resolution) cell finishes and prints one table per metric: object count and attribute accuracy (%), FD
and KID in a shapes2d classifier's feature space, held-out denoising MSE. The classifier comes from the config's
generation_eval (or the flags below). A rerun into the same DIR reuses the finished cells (--force recomputes them);
a DIR of another checkpoint's, config's or sample settings' results is refused.
(the same command as `vispe eval-generation`: vispe/cli/eval_generation.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.eval_generation import main  # noqa: E402

if __name__ == '__main__':
    main()
