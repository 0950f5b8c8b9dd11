"""Evaluate a trained checkpoint at image sizes it never saw in training, under each resolution strategy, and plot it.

    .venv/bin/python examples/eval_unseen_sizes.py CONFIG CHECKPOINT [--sizes 16 32 48 64 32x64] \
        [--strategies none interpolate] [--out eval_sizes]

CONFIG is the config the run was trained from (a training run writes a copy into its work dir, with every
--cfg-options applied), CHECKPOINT one of its .pth files, e.g. from `vispe train`. This is what
`vispe eval-resolution` does, as library calls: DIR/results.json (resumable: a rerun reuses finished cells) and
DIR/results.png. More: docs/guide/unseen-resolutions.md.
"""

import argparse
import os

from vispe.engine.config import load_config
from vispe.evaluation.trained_model import parse_resolution, resolution_label
from vispe.sweeps.resolution import evaluate_resolution


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help="the training run's config file")
    parser.add_argument('checkpoint', help='a checkpoint of that run')
    parser.add_argument('--sizes', nargs='+', default=None, help='32 or HxW; default: 0.5x to 3x the training size')
    parser.add_argument('--strategies', nargs='+', default=None, help="default: every one the model's encodings take")
    parser.add_argument('--out', default='eval_sizes', help='folder for results.json and results.png')
    args = parser.parse_args(argv)

    cfg = load_config(args.config)  # the model and the test set come from the config
    sizes = None if args.sizes is None else [parse_resolution(size) for size in args.sizes]
    # One cell per (strategy, size): the model is switched to the strategy and scored on the test set rendered or
    # resized to the size. Writes results.json cell by cell, then the figure.
    results = evaluate_resolution(cfg, args.checkpoint, sizes, args.strategies, out_dir=args.out, show_progress=False)

    # Every row of results.json: {'encoding', 'strategy', 'resolution', 'value'} (value: accuracy in %).
    train = results['train_resolution']
    print(f'{results["metric"]} (%) of {os.path.basename(args.checkpoint)}, trained at {resolution_label(train)}:')
    strategies = dict.fromkeys(row['strategy'] for row in results['results'])
    for strategy in strategies:
        rows = [row for row in results['results'] if row['strategy'] == strategy]
        cells = '  '.join(f'{resolution_label(row["resolution"])}: {row["value"]:5.1f}' for row in rows)
        print(f'  {strategy:<12} {cells}')
    print(f'table: {os.path.join(args.out, "results.json")}\nplot:  {os.path.join(args.out, "results.png")}')
    return results


if __name__ == '__main__':
    main()
