"""``vispe infer [CONFIG] CKPT FILE [FILE ...] [--topk 5]`` (tools/infer.py is this command): classify image files,
prepared as the config's test images, and print the top-k class names per file. Without CONFIG, the config the
checkpoint records as data (``vispe.engine.config_record``; its Python text is never run). An unreadable file is one
``error: FILE: problem`` line on stderr, the others still classified, exit status 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mmengine.config import Config

from vispe.cli.common import print_predictions
from vispe.engine.checkpoint import CheckpointError, load_checkpoint
from vispe.engine.config import CfgOptionsAction, ConfigError, apply_options, load_config
from vispe.engine.config_record import recorded_config
from vispe.evaluation.image_inference import image_view, predict_images
from vispe.evaluation.trained_model import load_model


def split_paths(paths: Sequence[str]) -> tuple[str | None, str, list[str]]:
    """(config or None, checkpoint, files) of the positional arguments: a first one ending in .py is the config."""
    config = paths[0] if paths and paths[0].endswith('.py') else None
    rest = list(paths[1:] if config else paths)
    if len(rest) < 2:
        raise ConfigError('give a checkpoint and at least one image file: vispe infer [CONFIG] CKPT FILE [FILE ...]')
    return config, rest[0], rest[1:]


def config_of(config: str | None, checkpoint: str, cfg_options: dict | None, hint: str = '') -> Config:
    """``config`` loaded (with --cfg-options), or the one the checkpoint records as data; ``hint`` says how to give
    a config when the checkpoint records none."""
    if config is not None:
        return load_config(config, cfg_options)
    cfg = recorded_config(
        load_checkpoint(checkpoint),
        checkpoint,
        hint or f'give the config it was trained with: vispe infer CONFIG {checkpoint} FILE ...',
    )
    if cfg_options:
        apply_options(cfg, cfg_options)  # as for a named config: a key nothing reads is refused
    return cfg


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage='%(prog)s [CONFIG] CKPT FILE [FILE ...] [--topk K] [--device D] [--cfg-options KEY=VALUE ...]',
        description='Classify image files with a trained vispe image classifier',
        epilog='CONFIG may be left out: the checkpoint holds the config it was trained from.',
    )
    parser.add_argument(
        'paths', nargs='+', metavar='PATH', help='the config (optional, a .py file), the checkpoint, the image files'
    )
    parser.add_argument('--topk', type=int, default=5, help='how many classes to print per file')
    parser.add_argument('--device', default='cpu')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        default=None,
        metavar='KEY=VALUE',
        help='override config entries, as for vispe train',
    )
    args = parser.parse_args(argv)
    try:
        config, checkpoint, files = split_paths(args.paths)
        load_checkpoint(checkpoint)  # a clear error for a missing or non-checkpoint file, before any work
        cfg = config_of(config, checkpoint, args.cfg_options)
        model, meta = load_model(cfg, checkpoint, args.device)
        predictions = predict_images(model, files, image_view(cfg, meta), args.topk)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
    print_predictions(predictions)


if __name__ == '__main__':
    main()
