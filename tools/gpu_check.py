"""The prepared GPU check: tools/gpu_check.sh runs this (the same command as `python -m workbench.gpu_check`).
It runs the GPU-marked tests of this checkout's tests/, then the benchmarks, into OUT/summary.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench.gpu_check import main  # noqa: E402  (imported first: the budget counts its imports)

if __name__ == '__main__':
    sys.exit(main())
