"""Classify your own point clouds (.ply, .pcd, .xyz, .pts) or meshes (.off, .obj, .stl) with a trained point model:

    vispe infer-points CONFIG CKPT FILE [FILE ...] [--topk 3] [--frame bbox]

Each file is farthest-point sampled to the config's test point count and put in its data set's frame (primitives3d:
centred on its bounding box, in the data's unit; ModelNet40: centred and scaled into the unit sphere) before the
model sees it. Prints the top-k classes with their probabilities, one line per file. A file that cannot be read is
one `error: FILE: problem` line on stderr and the others are still classified; the exit status is then 1, after a
count of the files that failed. A cloud with under half of the point count is classified, with a warning.
(tools/infer_points.py in a checkout is this command)
"""

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
