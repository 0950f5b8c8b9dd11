"""Train from an mmengine config: python tools/train.py CONFIG [--work-dir D] [--resume] [--amp] [--cfg-options k=v]

Multi-GPU / multi-process: torchrun --nproc_per_node N tools/train.py CONFIG --launcher pytorch
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.engine.checkpoint import CheckpointError, DiskFullError, allow_mmengine_checkpoints  # noqa: E402
from vispe.engine.config import (  # noqa: E402
    ConfigError,
    common_parser_args,
    compile_backbone,
    enable_amp,
    load_config,
    setup_distributed_backend,
)
from vispe.engine.distributed import setup_cpu_distributed, teardown_distributed  # noqa: E402
from vispe.engine.hooks import NonFiniteLossError  # noqa: E402
from vispe.engine.runner import build_runner, interrupted_message  # noqa: E402
from vispe.engine.workdir import WorkDirError  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description='Train a vispe model with the mmengine Runner')
    common_parser_args(parser)
    parser.add_argument('--work-dir', help='where logs and checkpoints go (default: work_dirs/<config name>)')
    parser.add_argument(
        '--resume',
        action='store_true',
        help="continue the work dir's run from its newest complete checkpoint (checked against the config first)",
    )
    parser.add_argument(
        '--overwrite', action='store_true', help='replace the checkpoints of another run already in the work dir'
    )
    parser.add_argument(
        '--amp',
        action='store_true',
        help="bf16 autocast (mmengine's AmpOptimWrapper on GPU, vispe's BF16OptimWrapper on CPU)",
    )
    parser.add_argument(
        '--compile', action='store_true', help="torch.compile the model's backbone in place (state-dict keys unchanged)"
    )
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main():
    args = parse_args()
    cfg = None
    try:
        cfg = load_config(args.config, args.cfg_options, args.work_dir)
        cfg.launcher = args.launcher
        # VispeRunner picks the work dir's newest complete checkpoint, before the config's load_from (pretrained
        # weights an interrupted fine-tune started from), and checks it against the config before writing anything
        cfg.resume = args.resume
        if args.overwrite:
            cfg.overwrite_work_dir = True
        if args.amp:
            enable_amp(cfg)
        setup_distributed_backend(cfg)
        setup_cpu_distributed(cfg)
        allow_mmengine_checkpoints()
        runner = build_runner(cfg)
        if args.compile:
            compile_backbone(runner.model)
        runner.train()
    except KeyboardInterrupt:  # Ctrl-C: one line saying where the run can be continued from (rank 0 says it)
        if os.environ.get('RANK', '0') == '0':
            print(interrupted_message(args.config, cfg, args), file=sys.stderr)
        sys.exit(130)
    except (ConfigError, CheckpointError, WorkDirError, DiskFullError, NonFiniteLossError, FileNotFoundError) as err:
        sys.exit(f'error: {err}')
    del runner  # teardown must be able to free the DDP wrapper
    teardown_distributed()


if __name__ == '__main__':
    main()
