"""The video block of the leaderboard (several hours on CPU for the full board; not for CI):

python tools/leaderboard_video.py [--encodings ...] [--tasks direction] [--seeds 0 1 2] [--epochs N] [--jobs 2] \\
    [--out outputs/leaderboard_video] [--archive results/leaderboard_video] [--no-train]

Trains the tiny space-time ViT on ShapesVideo per encoding, task and seed (finished runs are reused), sweeps each at
T/2 to 4T frames and 0.5x to 2x the frame size with every strategy, and writes OUT/leaderboard.md, .json and .png.
Each run's results are archived in results/leaderboard_video/ (committed: the runs behind the docs' tables); a run
found there is not trained again.

The same command as `vispe leaderboard-video` (vispe/cli/leaderboard_video.py), with its outputs under this
checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from workbench.leaderboard_video import main  # noqa: E402

if __name__ == '__main__':
    main(
        default_out=os.path.join(ROOT, 'outputs', 'leaderboard_video'),
        default_archive=os.path.join(ROOT, 'results', 'leaderboard_video'),
    )
