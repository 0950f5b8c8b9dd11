"""Record MAE's sin-cos tables into tests/data/parity/sincos_video.pt, which tests/parity/test_parity_mae_video.py
compares vispe's ``ape_sincos`` on video grids (ndim=3) with.

vispe's 3D sin-cos is its own composition (a third of the frequency pairs per axis, column, row, then time), built
from MAE's blocks; no reference defines that split. What a reference does define is each block: MAE
(facebookresearch/mae at commit efb2a8062c206524e35e47d04501ed4f544c0ae8, ``util/pos_embed.py``):
``get_2d_sincos_pos_embed`` (a square frame: the column's sin-cos, then the row's) and
``get_1d_sincos_pos_embed_from_grid`` (one coordinate: sines of p / 10000^(i / (D/2)), then cosines). The module
uses ``np.float``, an alias of the builtin float that numpy 1.24 removed: the recorder sets it back
(``np.float = float``) before calling. Run:

    git --git-dir=<mirror of facebookresearch/mae> archive HEAD util | tar -x -C /tmp/ref/mae
    python tools/parity/record_sincos_video.py /tmp/ref/mae

Recorded, in float64 (MAE's numpy): the 2D table of a 3 x 3 frame at width 32 and the 1D table of 2 time steps at
width 16, the two parts of vispe's table at width 48 (8 frequency pairs an axis).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'sincos_video.pt')
COMMIT = 'efb2a8062c206524e35e47d04501ed4f544c0ae8'
SIDE, FRAMES, SPATIAL, TEMPORAL = 3, 2, 32, 16


def main(root: str) -> None:
    np.float = float  # the alias MAE's code uses (removed from numpy 1.24)
    sys.path.insert(0, root)
    from util import pos_embed

    spatial = pos_embed.get_2d_sincos_pos_embed(SPATIAL, SIDE)  # (SIDE * SIDE, 32), row-major (h, w)
    temporal = pos_embed.get_1d_sincos_pos_embed_from_grid(TEMPORAL, np.arange(FRAMES, dtype=np.float32))
    source = inspect.getsource(pos_embed.get_2d_sincos_pos_embed_from_grid) + inspect.getsource(
        pos_embed.get_1d_sincos_pos_embed_from_grid
    )
    record = {
        'reference': f'facebookresearch/mae@{COMMIT}:util/pos_embed.py:get_2d_sincos_pos_embed, '
        'get_1d_sincos_pos_embed_from_grid',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'grid': [FRAMES, SIDE, SIDE],
        'spatial': torch.from_numpy(spatial), 'temporal': torch.from_numpy(temporal),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '/tmp/ref/mae')
