"""Time one training step of a ViT (or an attention layer) per positional encoding; --mixed-sizes,
--scaling, --throughput: see `vispe benchmark -h`. The same command as `vispe benchmark` (vispe/cli/benchmark.py),
its figures judged against this project's targets (workbench/targets.py).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.benchmark import main  # noqa: E402
from workbench.targets import BENCHMARK_TARGETS  # noqa: E402

if __name__ == '__main__':
    sys.exit(main(targets=BENCHMARK_TARGETS))
