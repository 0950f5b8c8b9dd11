"""Train from an mmengine config: python tools/train.py CONFIG [--work-dir D] [--resume] [--amp] [--cfg-options k=v]

Multi-GPU / multi-process: torchrun --nproc_per_node N tools/train.py CONFIG --launcher pytorch
(the same command as ``vispe train``: vispe/cli/train.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.train import main  # noqa: E402

if __name__ == '__main__':
    main()
