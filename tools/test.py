"""Test a checkpoint with the mmengine Runner and print its metrics: python tools/test.py CONFIG CKPT"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mmengine.runner import Runner  # noqa: E402

from vispe.engine.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from vispe.engine.config import ConfigError, common_parser_args, load_config  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Test a vispe checkpoint')
    common_parser_args(parser)
    parser.add_argument('checkpoint')
    parser.add_argument('--work-dir', help='where the test logs go (default: work_dirs/<config name>)')
    args = parser.parse_args()
    try:
        cfg = load_config(args.config, args.cfg_options, args.work_dir)
        load_checkpoint(args.checkpoint)  # a clear error for a missing or non-checkpoint file, before any work
    except (ConfigError, CheckpointError, FileNotFoundError) as err:
        sys.exit(f'error: {err}')
    cfg.load_from = args.checkpoint
    cfg.resume = False
    try:
        metrics = Runner.from_cfg(cfg).test()
    except ConfigError as err:  # data that do not fit the model (ClassCountHook)
        sys.exit(f'error: {err}')
    for key, value in metrics.items():
        print(f'{key}: {value:.4f}' if isinstance(value, float) else f'{key}: {value}')


if __name__ == '__main__':
    main()
