"""``vispe show-encoding ENC [ENC ...] [--grid 14] [--sizes 14 28] [--strategies none interpolate] --out DIR``
(tools/show_encoding.py is this command): position-similarity maps and relative kernels of encodings at their
initialisation (``vispe.evaluation.encoding_maps``) into DIR/encoding_maps.png and .json; with ``--checkpoint CKPT``
(and ``--config CFG`` where the checkpoint records none) the maps of a trained model's encodings as learned and its
mean attention distance per layer and head (DIR/attention_distance.png and .json)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from vispe.engine.checkpoint import CheckpointError
from vispe.engine.config import ConfigError
from vispe.evaluation.encoding_maps import KINDS, QUERIES, encoding_maps, model_maps
from vispe.evaluation.encoding_plots import plot_maps


def query(text: str) -> tuple[float, float]:
    """'0.5,0.25' -> (0.5, 0.25): a query as (row, column) fractions of the training grid."""
    try:
        r, c = (float(v) for v in text.split(','))
    except ValueError:
        raise argparse.ArgumentTypeError(f'query {text!r} is not ROW,COL fractions such as 0.5,0.5') from None
    if not (0 <= r < 1 and 0 <= c < 1):
        raise argparse.ArgumentTypeError(f'query {text!r}: fractions of the grid lie in [0, 1), e.g. 0.25,0.75')
    return r, c


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description='Draw what positional encodings do: similarity maps, kernels')
    p.add_argument('encodings', nargs='*', help="encoding specs: rope_mixed ape_learned:lape=true 'rope_axial+peg'")
    p.add_argument('--grid', type=int, default=14, help='the training grid, tokens per side (default 14)')
    p.add_argument(
        '--sizes',
        type=int,
        nargs='+',
        default=None,
        help='grids to draw, tokens per side (default: 1x and 2x the grid)',
    )
    p.add_argument('--strategies', nargs='+', default=None, help='resolution strategies (default: each its own)')
    p.add_argument('--kind', choices=KINDS, default='auto', help='the map to draw (default: auto, by the hooks)')
    p.add_argument('--queries', type=query, nargs='+', default=list(QUERIES), help='queries as ROW,COL fractions')
    p.add_argument('--heads', type=int, nargs='+', default=None, help='kernel heads to average (default: all)')
    p.add_argument('--seed', type=int, default=0, help='the seed the encodings are initialised from')
    p.add_argument('--checkpoint', default=None, help="a trained checkpoint: draw its encodings' maps as learned")
    p.add_argument('--config', default=None, help="the checkpoint's config (default: the one it records)")
    p.add_argument('--num-images', type=int, default=8, help='images for the attention distance (default 8)')
    p.add_argument('--device', default='cpu', help='device for the attention distance (default cpu)')
    p.add_argument('--out', required=True, help='output folder for encoding_maps.png and .json')
    return p


def write(result: dict[str, Any], out: str, name: str, title: str = '') -> list[str]:
    """``result`` as OUT/NAME.json and its figure as OUT/NAME.png; returns both paths."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f'{name}.json')
    with open(path, 'w') as f:
        json.dump(result, f)
    return [path, plot_maps(result, os.path.join(out, f'{name}.png'), title)]


def checkpoint_outputs(args: argparse.Namespace) -> list[str]:
    """The trained model's maps and its attention distances, written into ``args.out``."""
    from vispe.cli.infer import config_of
    from vispe.evaluation.attention_distance import (
        attention_distances,
        plot_attention_distances,
    )
    from vispe.evaluation.trained_model import encoding_label, load_model, model_patch_size, train_resolution

    cfg = config_of(args.config, args.checkpoint, None, 'give the config it was trained with: --config CONFIG')
    model, meta = load_model(cfg, args.checkpoint, 'cpu')
    train = train_resolution(cfg, meta)
    (ph, pw), (th, tw) = model_patch_size(model), (train, train) if isinstance(train, int) else train
    grid = (th // ph, tw // pw)
    sizes = args.sizes or [grid[0], 2 * grid[0]]
    label = encoding_label(model, meta)
    result = model_maps(model, label, grid, sizes, args.strategies, args.queries, args.heads, args.seed)
    written = write(result, args.out, 'encoding_maps', f'{label} as learned ({os.path.basename(args.checkpoint)})')
    pixels = [s * ph for s in sizes]
    for strategy in args.strategies or [None]:  # one figure per strategy asked for, else the model's own
        name = 'attention_distance' + (f'_{strategy}' if strategy else '')
        distances = attention_distances(
            cfg, args.checkpoint, pixels, num_images=args.num_images, device=args.device, strategy=strategy
        )
        path = os.path.join(args.out, f'{name}.json')
        with open(path, 'w') as f:
            json.dump(distances, f)
        written += [path, plot_attention_distances(distances, os.path.join(args.out, f'{name}.png'))]
    return written


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    args = parser(prog).parse_args(argv)
    if bool(args.encodings) == bool(args.checkpoint):
        raise SystemExit('error: name encodings (vispe show-encoding rope_mixed ape_learned ...) or --checkpoint CKPT')
    try:
        if args.checkpoint:
            written = checkpoint_outputs(args)
        else:
            sizes = args.sizes or [args.grid, 2 * args.grid]
            result = encoding_maps(
                args.encodings, args.grid, sizes, args.strategies, args.queries, args.kind, args.heads, args.seed
            )
            for line in [*result['notes'], *(f'{s["encoding"]}: skipped, {s["reason"]}' for s in result['skipped'])]:
                print(f'note: {line}')
            written = write(result, args.out, 'encoding_maps')
    except (ValueError, TypeError, ConfigError, CheckpointError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from None
    for path in written:
        print(path)


if __name__ == '__main__':
    main()
