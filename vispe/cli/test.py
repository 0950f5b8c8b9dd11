"""``vispe test CONFIG CKPT [--non-strict]`` (tools/test.py is this command): test a checkpoint with the mmengine
Runner and print its metrics. The checkpoint must fit the config's model key for key and shape for shape
(``--non-strict`` loads what fits and lists the rest); another test size or strategy is a ``--cfg-options`` entry."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vispe.datasets.samples import SampleError
from vispe.engine.checkpoint import CheckpointError, load_checkpoint
from vispe.engine.config import ConfigError, common_parser_args, load_config
from vispe.engine.runner import build_runner
from vispe.engine.train import release_instances
from vispe.engine.workdir import WorkDirError
from vispe.evaluation.trained_model import label_by_checkpoint


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description='Test a vispe checkpoint')
    common_parser_args(parser)
    parser.add_argument('checkpoint')
    parser.add_argument('--work-dir', help='where the test logs go (default: work_dirs/<config name>)')
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options, args.work_dir)
        ckpt = load_checkpoint(args.checkpoint)  # a clear error for a missing or non-checkpoint file, before any work
        label_by_checkpoint(cfg, ckpt.get('meta'))  # labels follow the class names the checkpoint trained on
        cfg.load_from, cfg.resume = args.checkpoint, False
        # a test run: no training parts, so nothing of a training run in the same work dir is touched
        cfg.train_dataloader = cfg.train_cfg = cfg.optim_wrapper = cfg.param_scheduler = None
        runner = build_runner(cfg)
        try:
            metrics = runner.test()
        finally:
            release_instances(runner.experiment_name)
    except SampleError as err:  # an unreadable file in the data: named, before mmengine's traceback of the loop
        sys.exit(f'error: {err.line()}')
    except (ConfigError, CheckpointError, WorkDirError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
    for key, value in metrics.items():
        print(f'{key}: {value:.4f}' if isinstance(value, float) else f'{key}: {value}')


if __name__ == '__main__':
    main()
