"""The encoding leaderboard (about an hour or more on CPU; not for CI):

python tools/leaderboard.py [--encodings ...] [--tasks position relation] [--seeds 0 1 2] \\
    [--resolutions 32 16 ... 24x44] [--regimes fixed sizes aspect] [--out outputs/leaderboard] [--models models] \\
    [--archive results/leaderboard] [--jobs N]

Trains every encoding on each shapes2d task with one schedule and each seed (finished runs are reused), evaluates
at every resolution with every strategy, writes OUT/leaderboard.md, .json and .png, and exports the first seed's
checkpoints to the model zoo (MODELS/<name>/, MODELS/README.md). Each run's results are archived in
results/leaderboard/ (committed: the runs behind the README's tables); a run found there is not trained again.

The same command as `vispe leaderboard` (vispe/cli/leaderboard.py), with its outputs under this checkout's root.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from workbench.leaderboard import main  # noqa: E402

if __name__ == '__main__':
    main(
        default_out=os.path.join(ROOT, 'outputs', 'leaderboard'),
        default_models=os.path.join(ROOT, 'models'),
        default_archive=os.path.join(ROOT, 'results', 'leaderboard'),
    )
