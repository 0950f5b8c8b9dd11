"""Record timm's resampling of a learned position table into tests/data/parity/ape_learned.pt, which
tests/parity/test_parity_timm.py compares vispe's ``ape_learned`` and its ``bicubic``, ``bilinear`` and ``nearest``
strategies with.

The reference is timm 1.0.31 (huggingface/pytorch-image-models, the tagged release v1.0.31):
``timm/layers/pos_embed.py``: ``resample_abs_pos_embed`` (the table as an image, ``F.interpolate`` with
``align_corners=False``, antialiased by default), for each interpolation and both antialias settings (nearest has
none), and ``timm/models/vision_transformer.py``: ``VisionTransformer._pos_embed`` with ``dynamic_img_size=True`` and
``no_embed_class=True`` (what a timm ViT adds to its patch tokens at another image size: the table resampled with
the defaults, bicubic and antialiased; the cls token gets no table entry). timm is one of vispe's dependencies, so
the recorder runs the installed copy, which it checks is that release:

    pip install timm==1.0.31
    python tools/parity/record_ape_learned.py

timm resamples in float32 (it casts the table to float32 before interpolating), so the record is float32.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import timm
import torch
from timm.layers import pos_embed
from timm.models.vision_transformer import VisionTransformer

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'ape_learned.pt')
DIM, GRID = 4, (4, 4)  # width, the table's (training) grid
GRIDS = ((6, 5), (3, 2), (5, 3))  # larger, smaller, one axis each way
SETTINGS = (('bicubic', True), ('bicubic', False), ('bilinear', True), ('bilinear', False), ('nearest', False))


def main() -> None:
    assert timm.__version__ == '1.0.31', f'record from timm 1.0.31, found {timm.__version__}'
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(1, GRID[0] * GRID[1], DIM, generator=generator)
    cases = []
    for interpolation, antialias in SETTINGS:
        for grid in GRIDS:
            out = pos_embed.resample_abs_pos_embed(
                table, new_size=list(grid), old_size=list(GRID), num_prefix_tokens=0,
                interpolation=interpolation, antialias=antialias,
            )  # fmt: skip
            cases.append({'interpolation': interpolation, 'antialias': antialias, 'grid': list(grid), 'table': out})

    vit = VisionTransformer(
        img_size=GRID[0] * 16, patch_size=16, embed_dim=DIM, depth=1, num_heads=2, num_classes=0,
        no_embed_class=True, dynamic_img_size=True,
    ).eval()  # fmt: skip
    with torch.no_grad():
        vit.pos_embed.copy_(table)
    vit_grid = GRIDS[0]
    tokens = torch.randn(2, *vit_grid, DIM, generator=generator)  # (B, h, w, D), as timm's patch embedding gives them
    with torch.no_grad():
        vit_out = vit._pos_embed(tokens)  # (B, 1 + h*w, D): the cls token, then the patches with the table added

    source = inspect.getsource(pos_embed.resample_abs_pos_embed) + inspect.getsource(VisionTransformer._pos_embed)
    record = {
        'reference': 'huggingface/pytorch-image-models@v1.0.31:timm/layers/pos_embed.py:resample_abs_pos_embed',
        'reference_vit': 'huggingface/pytorch-image-models@v1.0.31:timm/models/vision_transformer.py:'
        'VisionTransformer._pos_embed',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'grid': list(GRID), 'pos_embed': table, 'cases': cases,
        'vit_grid': list(vit_grid), 'vit_tokens': tokens, 'vit_out': vit_out,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
