"""Record MAE's fixed 2D sin-cos table into tests/data/parity/ape_sincos.pt, which
tests/parity/test_parity_mae.py compares vispe's ``ape_sincos`` with.

The reference is facebookresearch/mae at commit efb2a8062c206524e35e47d04501ed4f544c0ae8, ``util/pos_embed.py``:
``get_2d_sincos_pos_embed`` (a square grid, with a zero row for the cls token) and
``get_2d_sincos_pos_embed_from_grid`` (here on a 3 x 5 grid laid out as ``get_2d_sincos_pos_embed`` lays out a square
one, column coordinate first, so that rows and columns cannot be confused). They run as they are, in float64 (their
frequencies are float64), from a local copy of the repository:

    git clone https://github.com/facebookresearch/mae /tmp/ref/mae
    git -C /tmp/ref/mae checkout efb2a8062c206524e35e47d04501ed4f544c0ae8
    PYTHONPATH=/tmp/ref/mae python tools/parity/record_ape_sincos.py

MAE was written against NumPy < 1.24, whose ``np.float`` was an alias of Python's ``float``; the recorder restores
that alias where NumPy no longer has it (nothing else is changed).
"""

from __future__ import annotations

import hashlib
import inspect
import os

import numpy as np
import torch

if not hasattr(np, 'float'):
    np.float = float  # the alias MAE's get_1d_sincos_pos_embed_from_grid uses (removed in NumPy 1.24)

from util import pos_embed  # noqa: E402  (MAE's util/pos_embed.py)

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'ape_sincos.pt')
COMMIT = 'efb2a8062c206524e35e47d04501ed4f544c0ae8'
DIM, SIDE, RECT = 16, 5, (3, 5)  # width, the square grid's side, the (h, w) of the rectangular grid


def main() -> None:
    square = pos_embed.get_2d_sincos_pos_embed(DIM, SIDE, cls_token=True)  # (1 + SIDE^2, DIM): the cls row first
    h, w = RECT
    grid = np.stack(np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)), axis=0)
    rect = pos_embed.get_2d_sincos_pos_embed_from_grid(DIM, grid.reshape(2, 1, h, w))  # (h*w, DIM), row-major
    source = inspect.getsource(pos_embed.get_2d_sincos_pos_embed) + inspect.getsource(
        pos_embed.get_2d_sincos_pos_embed_from_grid
    )
    record = {
        'reference': f'facebookresearch/mae@{COMMIT}:util/pos_embed.py:get_2d_sincos_pos_embed',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'side': SIDE, 'rect': list(RECT),
        'square': torch.from_numpy(square).double(), 'rect_table': torch.from_numpy(rect).double(),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
