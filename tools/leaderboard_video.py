"""The video block of the leaderboard (several hours on CPU for the full board; not for CI):
python tools/leaderboard_video.py [--encodings ...] [--tasks direction] [--seeds 0 1 2] [--jobs 2] ... (options:
--help; the steps: workbench/leaderboard_video.py).

Outputs under this checkout: outputs/leaderboard_video/, and each run's results archived in results/leaderboard_video/
(committed: the runs behind the docs' tables; a run found there is not trained again).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench.leaderboard_video import CHECKOUT, main  # noqa: E402

if __name__ == '__main__':
    main(**CHECKOUT)
