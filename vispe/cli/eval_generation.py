"""``vispe eval-generation CONFIG CKPT --resolutions 32 48 64 --samples-per-class 8 [--strategy none yarn ...] --out DIR
[--classifier-checkpoint PTH | --no-fd]`` (tools/eval_generation.py is this command): a diffusion checkpoint sampled
at several resolutions and scored offline (object count and attributes, FD and KID, denoising MSE) into
DIR/results.json and DIR/samples_<strategy>_<res>.png as a resumable sweep; the FD classifier is the config's
``generation_eval`` one unless given."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vispe.engine.atomic import DiskFullError
from vispe.engine.checkpoint import CheckpointError
from vispe.engine.config import ConfigError, common_parser_args, load_config
from vispe.engine.workdir import out_folder
from vispe.evaluation.report import console as report_console
from vispe.evaluation.trained_model import parse_resolution
from vispe.sweeps import engine
from vispe.sweeps import resolution as resolution_sweep
from vispe.sweeps.generation import METRICS, feature_extractor, metric_rows, sweep_generation


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description='Sample a vispe diffusion checkpoint at unseen resolutions')
    common_parser_args(parser)
    parser.add_argument('checkpoint')
    parser.add_argument('--resolutions', nargs='+', type=parse_resolution, required=True, help='e.g. 32 48 64')
    parser.add_argument('--samples-per-class', type=int, default=8)
    parser.add_argument(
        '--strategy',
        nargs='+',
        default=None,
        help="rotary strategies (default: all supported, with DyPE's dype_ntk and dype_yarn)",
    )
    parser.add_argument('--classifier-config', default=None, help="default: the config's generation_eval")
    parser.add_argument('--classifier-checkpoint', default=None, help="default: the config's generation_eval")
    parser.add_argument('--no-fd', action='store_true', help='skip FD and KID (no feature extractor needed)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument(
        '--out', type=out_folder, required=True, help='output folder for results.json and the sample grids'
    )
    parser.add_argument('--device', default=None, help='cpu or cuda (default: cuda when available)')
    engine.force_parser_args(parser)
    args = parser.parse_args(argv)
    console = report_console()
    try:
        cfg = load_config(args.config, args.cfg_options)
        classifier = None
        if not args.no_fd:
            classifier = feature_extractor(cfg, args.classifier_config, args.classifier_checkpoint)
        results = sweep_generation(
            cfg,
            args.checkpoint,
            args.resolutions,
            args.strategy,
            args.samples_per_class,
            classifier,
            args.out,
            args.device,
            args.seed,
            log=console.print,
            force=args.force,
        )
    except KeyboardInterrupt:
        sys.exit(engine.interrupted_message(args.out))
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError, DiskFullError) as err:
        sys.exit(f'error: {err}')
    for metric in METRICS:
        rows = metric_rows(results, metric)
        if rows or results['failed']:
            title = f'{metric} of {os.path.basename(args.checkpoint)}'
            console.print(resolution_sweep.results_table(rows, title=title, metric=metric, failed=results['failed']))
    console.print(f'results: {os.path.join(args.out, engine.RESULTS)}\nsample grids: {args.out}/samples_*.png')
    sys.exit(engine.failure_message(results, args.out))


if __name__ == '__main__':
    main()
