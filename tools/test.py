"""Test a checkpoint with the mmengine Runner and print its metrics: python tools/test.py CONFIG CKPT [--non-strict]

The checkpoint must fit the model the config builds, key for key and shape for shape; a mismatch is refused naming
the keys. ``--non-strict`` loads what fits and lists the keys it left at their initial values. A test size and a
resolution strategy: --cfg-options test_dataloader.dataset.image_size=64 model.backbone.encoding.strategy=interpolate
(the same command as `vispe test`: vispe/cli/test.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.test import main  # noqa: E402

if __name__ == '__main__':
    main()
