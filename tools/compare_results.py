"""Merge several runs' sweep results into one table and one figure: see `vispe compare-results -h`.
(the same command as `vispe compare-results`: vispe/cli/compare_results.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.compare_results import main  # noqa: E402

if __name__ == '__main__':
    main()
