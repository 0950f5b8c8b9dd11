"""Run timm's own model tests over vispe's names: python tools/timm_model_tests.py TIMM_SOURCE [--sizes tiny small]
(the same command as `python -m workbench.timm_tests`)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workbench.timm_tests import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
