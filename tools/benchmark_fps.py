"""Farthest-point sampling, vispe's batched torch version against open3d's, for time and coverage:

python tools/benchmark_fps.py [--settings 32x1024x64 8x8192x512] [--device cuda] [--threads 2] [--out F.json]

Settings are BATCHxPOINTSxPICKS. Prints a table and writes JSON (default outputs/benchmark/fps.json). Method:
vispe/evaluation/fps_benchmark.py.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from vispe.evaluation import fps_benchmark as F  # noqa: E402


def setting(text: str):
    try:
        batch, points, picks = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not BATCHxPOINTSxPICKS, e.g. 32x1024x64') from None
    if min(batch, points, picks) < 1 or picks > points:
        raise argparse.ArgumentTypeError(f'{text!r}: need positive numbers and picks <= points')
    return batch, points, picks


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--settings', nargs='+', type=setting, default=list(F.DEFAULT_SETTINGS))
    parser.add_argument('--device', choices=('cpu', 'cuda'), default='cpu', help="vispe's device (open3d: CPU)")
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (default: leave as is)')
    parser.add_argument('--out', default='outputs/benchmark/fps.json')
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = F.run(args.settings, args.device, repeats=args.repeats)
    F.print_rows(rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump({'threads': torch.get_num_threads(), 'rows': rows}, f, indent=2)
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
