"""Classify your own point clouds or meshes with a trained point model: see `vispe infer-points -h`.
(the same command as `vispe infer-points`: vispe/cli/infer_points.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.infer_points import main  # noqa: E402

if __name__ == '__main__':
    main()
