"""``vispe train CONFIG [--work-dir D] [--resume] [--amp] [--cfg-options k=v]`` (tools/train.py is this command).

CONFIG is a file or a shipped config's name (vit/vit_tiny_shapes2d_position.py). Multi-GPU / multi-process:
torchrun --nproc_per_node N -m vispe train CONFIG --launcher pytorch
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vispe.datasets.samples import SampleError
from vispe.engine.atomic import DiskFullError
from vispe.engine.checkpoint import CheckpointError
from vispe.engine.config import ConfigError, common_parser_args
from vispe.engine.hooks import NonFiniteLossError
from vispe.engine.runner import interrupted_message
from vispe.engine.train import run_training, training_config
from vispe.engine.workdir import WorkDirError
from vispe.optional import MissingExtra


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description='Train a vispe model with the mmengine Runner')
    common_parser_args(parser)
    parser.add_argument('--work-dir', help='where logs and checkpoints go (default: work_dirs/<config name>)')
    parser.add_argument(
        '--resume',
        action='store_true',
        help="continue the work dir's run from its newest complete checkpoint (checked against the config first)",
    )
    parser.add_argument(
        '--overwrite',
        action='store_true',
        help='replace another run already in the work dir (its checkpoints move into a replaced-<time> folder there)',
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
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def invoked_as(prog: str | None) -> str:
    """The command the user ran, for messages that say what to run next: the ``vispe`` command passes its own
    ('vispe train'); a script run directly is named as run ('python tools/train.py')."""
    if prog:
        return prog
    script = sys.argv[0] if sys.argv and sys.argv[0] else ''
    return f'python {script}' if script.endswith('.py') else 'vispe train'


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    args = parse_args(argv, prog)
    cfg = None
    try:
        cfg = training_config(
            args.config, args.work_dir, args.cfg_options, args.resume, args.overwrite, args.amp, args.launcher
        )
        run_training(cfg, args.compile)
    except KeyboardInterrupt:  # Ctrl-C: one line saying where the run can be continued from (rank 0 says it)
        if os.environ.get('RANK', '0') == '0':
            print(interrupted_message(args.config, cfg, args, invoked_as(prog)), file=sys.stderr)
        sys.exit(130)
    except SampleError as err:  # an unreadable file in the data: named, before mmengine's traceback of the loop
        sys.exit(f'error: {err.line()}')
    except (ConfigError, CheckpointError, WorkDirError, DiskFullError, NonFiniteLossError, FileNotFoundError) as err:
        sys.exit(f'error: {err}')
    except MissingExtra as err:  # a 3D config without open3d: the one line that names the extra
        sys.exit(f'error: {err}')


if __name__ == '__main__':
    main()
