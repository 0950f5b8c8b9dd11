"""Record MAE's (and DeiT's) bicubic resizing of a learned position table into
tests/data/parity/ape_learned_mae.pt, which tests/parity/test_parity_mae.py compares vispe's ``ape_learned`` with
(``strategy='bicubic'``, ``antialias=False``).

The reference is facebookresearch/mae at commit efb2a8062c206524e35e47d04501ed4f544c0ae8, ``util/pos_embed.py``:
``interpolate_pos_embed`` (DeiT's: the table as a square image, ``F.interpolate(mode='bicubic',
align_corners=False)`` with no antialiasing, the extra tokens' entries kept). It runs as it is, in float64, on a
stand-in model that has what it reads (``patch_embed.num_patches`` and a ``pos_embed`` of the new size, without extra
tokens, as vispe's table has none) and on a checkpoint dict holding the table, from a local copy of the repository:

    git clone https://github.com/facebookresearch/mae /tmp/ref/mae
    git -C /tmp/ref/mae checkout efb2a8062c206524e35e47d04501ed4f544c0ae8
    PYTHONPATH=/tmp/ref/mae python tools/parity/record_ape_learned_mae.py
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import os
from types import SimpleNamespace

import torch
from util import pos_embed  # MAE's util/pos_embed.py

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'ape_learned_mae.pt')
COMMIT = 'efb2a8062c206524e35e47d04501ed4f544c0ae8'
DIM, SIDE, SIDES = 8, 4, (6, 3)  # width, the table's side, the sides it is resized to


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(1, SIDE * SIDE, DIM, generator=generator, dtype=torch.float64)
    cases = []
    for side in SIDES:
        model = SimpleNamespace(
            patch_embed=SimpleNamespace(num_patches=side * side), pos_embed=torch.zeros(1, side * side, DIM)
        )
        checkpoint = {'pos_embed': table.clone()}
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the sizes
            pos_embed.interpolate_pos_embed(model, checkpoint)
        cases.append({'grid': [side, side], 'table': checkpoint['pos_embed']})
    record = {
        'reference': f'facebookresearch/mae@{COMMIT}:util/pos_embed.py:interpolate_pos_embed',
        'source_sha256': hashlib.sha256(inspect.getsource(pos_embed.interpolate_pos_embed).encode()).hexdigest(),
        'dim': DIM, 'grid': [SIDE, SIDE], 'pos_embed': table, 'cases': cases,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
