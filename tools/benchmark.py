r"""Time one training step (forward + backward) of a ViT, or of one attention layer, per positional encoding.

    python tools/benchmark.py --model vit_small_patch16_224 --img-size 224 --batch-size 8 \
        --encodings ape_learned rope_axial irpe irpe:mode=bias --repeats 10 [--level attention] [--device cuda]

Prints the configuration and a table (median ms, min ms, ratio to the baseline's median, peak MB) and writes
JSON. Method and caveats: vispe/evaluation/benchmark.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: vispe is not pip-installed
from vispe.evaluation.benchmark import (
    LEVELS,
    BenchmarkConfig,
    build_subjects,
    default_out_path,
    measure,
    normalize_img_size,
    print_report,
    write_report,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        '--model', default='vit_small_patch16_224', help="any timm ViT name, or a DiT: 'DiT-S/2', 'DiT-Ti/4'"
    )
    p.add_argument('--img-size', type=int, nargs='+', default=[224], metavar='N', help='S, or H W')
    p.add_argument('--batch-size', type=int, default=8)
    p.add_argument(
        '--encodings',
        nargs='+',
        default=None,
        help="encoding names ('a+b' combines two; 'name:key=value,key=value' sets arguments, e.g. "
        "'irpe:mode=bias' or 'irpe:on=qkv+ape_learned'); default: every image (2D) one. The baseline is added",
    )
    p.add_argument(
        '--baseline',
        default=None,
        help="ratio denominator (default: ape_learned, ape_sincos for DiTs; 'sdpa' at attention level)",
    )
    p.add_argument('--level', choices=LEVELS, default='model')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps per encoding')
    p.add_argument('--repeats', type=int, default=10, help='timed interleaved rounds')
    p.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (default: leave as is)')
    p.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default=None, help='JSON path (default outputs/benchmark/<model>_<size>_<level>.json)')
    args = p.parse_args(argv)
    if len(args.img_size) not in (1, 2):
        p.error(f'--img-size takes one int or two (H W), got {len(args.img_size)}')
    if args.repeats < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error('--repeats and --batch-size must be >= 1, --warmup >= 0')
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = BenchmarkConfig(
        model=args.model,
        img_size=normalize_img_size(args.img_size),
        batch_size=args.batch_size,
        encodings=args.encodings,
        baseline=args.baseline,
        level=args.level,
        warmup=args.warmup,
        repeats=args.repeats,
        device=args.device,
        seed=args.seed,
    )
    try:
        subjects = build_subjects(cfg)
    except (ValueError, TypeError) as err:  # bad names, sizes or arguments: vispe's message says what to fix
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return 2
    report = measure(cfg, subjects)
    print_report(report)
    path = write_report(report, args.out or default_out_path(cfg.model, cfg.img_size, cfg.level))
    print(f'wrote {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
