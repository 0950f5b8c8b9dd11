"""vispe's farthest-point sampling against open3d's, timed side by side: see `vispe benchmark-fps -h`.
(the same command as `vispe benchmark-fps`: vispe/cli/benchmark_fps.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.benchmark_fps import main  # noqa: E402

if __name__ == '__main__':
    main()
