"""``vispe infer-points CONFIG CKPT FILE [FILE ...] [--topk 3] [--frame bbox]`` (tools/infer_points.py is this
command): classify point clouds (.ply, .pcd, .xyz, .pts) or meshes (.off, .obj, .stl), each sampled and framed as the
config's test set, one line per file. An unreadable file is one ``error: FILE: problem`` line on stderr, the others
still classified, exit status 1; a cloud under half the point count is classified with a warning."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vispe.cli.common import print_predictions
from vispe.engine.checkpoint import CheckpointError
from vispe.engine.config import ConfigError, common_parser_args, load_config
from vispe.evaluation.point_inference import dataset_view, predict_files
from vispe.evaluation.trained_model import build_model


def main(argv: Sequence[str] | None = None, prog: str | None = None):
    parser = argparse.ArgumentParser(
        prog=prog, description='Classify point-cloud files with a trained vispe point model'
    )
    common_parser_args(parser)
    parser.add_argument('checkpoint')
    parser.add_argument('files', nargs='+', help='point clouds or meshes open3d reads')
    parser.add_argument('--topk', type=int, default=3)
    parser.add_argument(
        '--frame', choices=['none', 'bbox', 'unit_sphere'], default=None, help="override the data set's frame"
    )
    parser.add_argument('--device', default='cpu')
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        model = build_model(cfg, args.checkpoint, args.device)
        view = dataset_view(cfg, args.checkpoint)
        if args.frame:
            view['frame'] = args.frame
        predictions = predict_files(model, args.files, view, args.topk)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
    print_predictions(predictions)
