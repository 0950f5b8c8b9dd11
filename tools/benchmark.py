"""Time one training step of a ViT (or an attention layer) per positional encoding; --mixed-sizes,
--scaling, --throughput: see `vispe benchmark -h`.
(the same command as `vispe benchmark`: vispe/cli/benchmark.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.benchmark import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
