"""Farthest-point sampling, vispe's batched torch version against open3d's, for time and coverage:

    vispe benchmark-fps [--settings 32x1024x64 8x8192x512] [--device cuda] [--threads 2] [--out fps.json]

Settings are BATCHxPOINTSxPICKS. Prints a table and writes JSON (default outputs/benchmark/fps_<hash>.json). Method:
vispe/bench/fps.py.
(tools/benchmark_fps.py in a checkout is this command)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from vispe.bench import fps as fps_bench
from vispe.evaluation.outputs import OutputConflict, check_target, run_id, write_json


def setting(text: str):
    try:
        batch, points, picks = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not BATCHxPOINTSxPICKS, e.g. 32x1024x64') from None
    if min(batch, points, picks) < 1 or picks > points:
        raise argparse.ArgumentTypeError(f'{text!r}: need positive numbers and picks <= points')
    return batch, points, picks


def main(argv: Sequence[str] | None = None, prog: str | None = None):
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--settings', nargs='+', type=setting, default=list(fps_bench.DEFAULT_SETTINGS))
    parser.add_argument('--device', choices=('cpu', 'cuda'), default='cpu', help="vispe's device (open3d: CPU)")
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (default: leave as is)')
    parser.add_argument(
        '--out',
        default=None,
        help='JSON path (default outputs/benchmark/fps_<settings hash>.json; a rerun of the same settings replaces '
        'its own report, any other existing file is refused without --force)',
    )
    parser.add_argument('--force', action='store_true', help="replace --out even when it is not this run's report")
    args = parser.parse_args(argv)
    run = run_id({k: getattr(args, k) for k in ('settings', 'device', 'repeats', 'threads')})
    out = args.out or f'outputs/benchmark/fps_{run}.json'
    try:
        check_target(out, 'fps', run, args.force, form='json')  # before anything is timed
    except OutputConflict as err:
        parser.exit(2, f'benchmark_fps: error: {err}\n')
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = fps_bench.run(args.settings, args.device, repeats=args.repeats)
    fps_bench.print_rows(rows)
    write_json(out, {'threads': torch.get_num_threads(), 'rows': rows}, 'fps', run, args.force)
    print(f'wrote {out}')
