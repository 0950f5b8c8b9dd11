"""Record 3DPPE's 3D point positional encoding (drilistbox/3DPPE) into tests/data/parity/3dppe.pt, which
tests/parity/test_parity_3dppe.py compares vispe's ``3dppe`` with (``depth_source='gt'``, ``anchor='corner'``).

The reference is drilistbox/3DPPE at commit a49bdc41d6a9bf9a294d3e0685b3058f1b095cd3,
``projects/mmdet3d_plugin/models/dense_heads/petr_depth_head.py`` (``PETRDepthHeadV2``, the head of its 3dpe
configs): ``_init_layers`` builds the position encoder (linear 3 C / 2 -> C, ReLU, linear C -> C, shared with the
query embedding; weights drawn here, seed 0, and recorded) and ``position_embeding`` takes each feature cell's pixel
(u, v) at its depth d to the world by the inverse of its view's ``lidar2img`` (u d, v d, d, 1), normalises the
point to ``position_range``, applies mmdet's ``inverse_sigmoid``, the module's ``pos2posemb3d`` (sine / cosine per
axis, axes y, x, z, temperature 10000) and the encoder. The depth is an input of ``position_embeding`` (the depth
net's expectation in training, a depth map here): vispe's ``depth_source='gt'`` takes the same per-token depth.
Both run as they are from local copies: the head from the repository (with its base, ``petr_head.py``),
``inverse_sigmoid`` from mmdet 2.25.0 (the version 3DPPE's install.md names).

The module imports mmcv, mmdet, mmdet3d, cv2 and the depth net for its detection training: those imports are
stood in for (``stand_ins.py``; mmcv.cnn's ``Conv2d`` and ``Linear`` are torch's, as in mmcv). ``__init__`` builds
that training stack, so the recorder makes the head without it and sets the attributes ``_init_layers`` and
``position_embeding`` read. The reference's width is 256, with ``pos2posemb3d``'s default 128 features per axis;
to keep the file small, ``embed_dims`` is 16 here and the module's ``pos2posemb3d`` is called with
``num_pos_feats=8`` (its own argument, C / 2 as at 256). Commands:

    git --git-dir=<mirror of drilistbox/3DPPE> archive HEAD | tar -x -C /tmp/ref/3DPPE
    pip install --target /tmp/ref-mmdet-2.25.0 --no-deps mmdet==2.25.0
    PPE_ROOT=/tmp/ref/3DPPE MMDET=/tmp/ref-mmdet-2.25.0 PYTHONPATH=. python tools/parity/record_3dppe.py

The file holds the cameras, the depth of each token, the settings, the encoder's weights and the reference's
embedding per view and feature cell, in float32 (the reference builds its pixel grid in float32).
"""

from __future__ import annotations

import functools
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stand_ins  # noqa: E402
from record_petr import intrinsics, lidar2img  # noqa: E402

ROOT = os.environ.get('PPE_ROOT', '/tmp/ref/3DPPE')
MMDET = os.environ.get('MMDET', '/tmp/ref-mmdet-2.25.0')
COMMIT = 'a49bdc41d6a9bf9a294d3e0685b3058f1b095cd3'
HEADS = 'projects/mmdet3d_plugin/models/dense_heads'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', '3dppe.pt')
VIEWS, GRID, PATCH, EMBED = 2, (2, 3), 8, 16
DEPTH_START, POSITION_RANGE = 1.0, [-8.0, -6.0, -4.0, 8.0, 6.0, 4.0]


def main() -> None:
    package = HEADS.replace('/', '.')
    stand_ins.install(
        ['mmcv', 'mmdet', 'mmdet3d', 'projects', 'cv2'],
        files={
            'mmdet.models.utils.transformer': os.path.join(MMDET, 'mmdet', 'models', 'utils', 'transformer.py'),
            f'{package}.petr_head': os.path.join(ROOT, HEADS, 'petr_head.py'),
            f'{package}.petr_depth_head': os.path.join(ROOT, HEADS, 'petr_depth_head.py'),
        },
        overrides={'mmcv.cnn': {'Conv2d': nn.Conv2d, 'Linear': nn.Linear}},
    )
    module = __import__(f'{package}.petr_depth_head', fromlist=['PETRDepthHeadV2'])
    assert module.inverse_sigmoid.__code__.co_filename.startswith(MMDET)  # mmdet's own, not a stand-in
    module.pos2posemb3d = functools.partial(module.pos2posemb3d, num_pos_feats=EMBED // 2)  # module doc

    torch.manual_seed(0)
    head = object.__new__(module.PETRDepthHeadV2)  # without __init__'s training stack (module doc)
    head.__dict__.update(
        with_position=True, with_multiview=False, with_2dpe_only=False, share_pe_encoder=True,
        with_pos_info=False, in_channels=4, embed_dims=EMBED, num_reg_fcs=2, normedlinear=False,
        cls_out_channels=10, code_size=10, num_pred=1, num_query=4, position_range=POSITION_RANGE,
        position_level=0,
    )  # fmt: skip
    head._init_layers()

    h, w = GRID
    generator = torch.Generator().manual_seed(0)
    cam_to_world = stand_ins.random_poses(generator, VIEWS)[None]
    K = intrinsics()
    depth = 1.5 + 5.5 * torch.rand(1, VIEWS, h, w, generator=generator, dtype=torch.float64)
    img_feats = [torch.zeros(1, VIEWS, 4, h, w)]
    img_metas = [{'pad_shape': [(h * PATCH, w * PATCH, 3)] * VIEWS, 'lidar2img': lidar2img(K, cam_to_world)}]
    masks = torch.zeros(1, VIEWS, h, w, dtype=torch.bool)
    with torch.no_grad():
        embedding, _ = head.position_embeding(img_feats, img_metas, masks, depth_map=depth.float())  # (B, V, C, h, w)
    encoder = head.position_encoder
    record = {
        'reference': f'drilistbox/3DPPE@{COMMIT}:{HEADS}/petr_depth_head.py:PETRDepthHeadV2.position_embeding',
        'source_sha256': stand_ins.sha256(os.path.join(ROOT, HEADS, 'petr_depth_head.py')),
        'grid': list(GRID), 'patch_size': PATCH, 'embed_dims': EMBED,
        'depth_start': DEPTH_START, 'position_range': POSITION_RANGE,
        'cam_to_world': cam_to_world, 'K': K, 'depth': depth,
        'linear1_weight': encoder[0].weight.detach(), 'linear1_bias': encoder[0].bias.detach(),
        'linear2_weight': encoder[2].weight.detach(), 'linear2_bias': encoder[2].bias.detach(),
        'embedding': embedding,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)')


if __name__ == '__main__':
    main()
