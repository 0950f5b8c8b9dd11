"""The encoding leaderboard (about an hour or more on CPU; not for CI): python tools/leaderboard.py [--encodings ...]
[--tasks position relation] [--seeds 0 1 2] ... (options: --help; the steps: workbench/leaderboard.py).

Outputs under this checkout: outputs/leaderboard/, the model zoo models/, and each run's results archived in
results/leaderboard/ (committed: the runs behind the docs' tables; a run found there is not trained again).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench.leaderboard import CHECKOUT, main  # noqa: E402

if __name__ == '__main__':
    main(**CHECKOUT)
