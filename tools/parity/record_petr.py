"""Record PETR's 3D position embedding (megvii-research/PETR) into tests/data/parity/petr.pt, which
tests/parity/test_parity_petr.py compares vispe's ``petr`` with (``anchor='corner'``).

The reference is megvii-research/PETR at commit f7525f93467a33707ef401c587a52d5e7b34de74,
``projects/mmdet3d_plugin/models/dense_heads/petr_head.py``: ``PETRHead._init_layers`` builds the position encoder
(1x1 conv 3 D -> 4 C, ReLU, 1x1 conv 4 C -> C; its weights drawn here, seed 0, and recorded) and
``PETRHead.position_embeding`` samples each feature cell's ray at D linear-increasing depths (``LID=True``, PETR's
setting) from ``depth_start`` to ``position_range[3]``, takes the points to the world by the inverse of each view's
``lidar2img`` (``viewpad(K) @ lidar2cam``, as its nuScenes dataset builds it), normalises them to
``position_range``, applies mmdet's ``inverse_sigmoid`` and the encoder. Both run as they are from local copies: the
head from the repository, ``inverse_sigmoid`` from mmdet 2.24.1 (``mmdet/models/utils/transformer.py``, the version
PETR's install.md names).

The head's module imports mmcv, mmdet and mmdet3d for its detection training (assigners, losses, the transformer,
the box coder): those imports are stood in for (``stand_ins.py``; mmcv.cnn's ``Conv2d`` and ``Linear``, which
``_init_layers`` builds from, are torch's, as in mmcv). ``PETRHead.__init__`` builds that training stack, so the
recorder makes the head without it and sets the attributes ``_init_layers`` and ``position_embeding`` read;
``embed_dims`` is 8 here (``__init__`` fixes it at 256) to keep the file small. Commands:

    git --git-dir=<mirror of megvii-research/PETR> archive HEAD | tar -x -C /tmp/ref/PETR
    pip install --target /tmp/ref-mmdet-2.24.1 --no-deps mmdet==2.24.1
    PETR_ROOT=/tmp/ref/PETR MMDET=/tmp/ref-mmdet-2.24.1 PYTHONPATH=. python tools/parity/record_petr.py

The file holds the cameras (OpenCV, camera-to-world, and K), the settings, the encoder's weights and the reference's
embedding per view and feature cell, in float32 (the reference builds its pixel grid in float32).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stand_ins  # noqa: E402

ROOT = os.environ.get('PETR_ROOT', '/tmp/ref/PETR')
MMDET = os.environ.get('MMDET', '/tmp/ref-mmdet-2.24.1')
COMMIT = 'f7525f93467a33707ef401c587a52d5e7b34de74'
HEAD = 'projects/mmdet3d_plugin/models/dense_heads/petr_head.py'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'petr.pt')
VIEWS, GRID, PATCH, DEPTHS, EMBED = 2, (2, 3), 8, 4, 8
DEPTH_START, POSITION_RANGE = 1.0, [-8.0, -6.0, -4.0, 8.0, 6.0, 4.0]


def intrinsics() -> torch.Tensor:
    """(1, V, 3, 3) float64 pixel intrinsics, non-square and off-centre, without skew."""
    K = torch.zeros(1, VIEWS, 3, 3, dtype=torch.float64)
    K[..., 0, 0], K[..., 1, 1] = torch.tensor([20.0, 14.0]), torch.tensor([18.0, 15.0])
    K[..., 0, 2], K[..., 1, 2] = torch.tensor([12.5, 10.0]), torch.tensor([7.0, 9.5])
    K[..., 2, 2] = 1.0
    return K


def lidar2img(K: torch.Tensor, cam_to_world: torch.Tensor) -> list:
    """Per view, the reference's ``lidar2img``: viewpad(K) @ world-to-camera, numpy float64 (4, 4)."""
    mats = []
    for k, pose in zip(K[0].numpy(), cam_to_world[0].double().numpy()):
        viewpad = np.eye(4)
        viewpad[:3, :3] = k
        mats.append(viewpad @ np.linalg.inv(pose))
    return mats


def main() -> None:
    stand_ins.install(
        ['mmcv', 'mmdet', 'mmdet3d', 'projects'],
        files={
            'mmdet.models.utils.transformer': os.path.join(MMDET, 'mmdet', 'models', 'utils', 'transformer.py'),
            'projects.mmdet3d_plugin.models.dense_heads.petr_head': os.path.join(ROOT, HEAD),
        },
        overrides={'mmcv.cnn': {'Conv2d': nn.Conv2d, 'Linear': nn.Linear}},
    )
    from projects.mmdet3d_plugin.models.dense_heads.petr_head import PETRHead

    inverse_sigmoid = sys.modules[PETRHead.__module__].inverse_sigmoid
    assert inverse_sigmoid.__code__.co_filename.startswith(MMDET)  # mmdet's own, not a stand-in

    torch.manual_seed(0)
    head = object.__new__(PETRHead)  # without __init__'s training stack (module doc)
    head.__dict__.update(
        with_position=True, with_multiview=False, in_channels=4, embed_dims=EMBED, num_reg_fcs=2,
        normedlinear=False, cls_out_channels=10, code_size=10, num_pred=1, num_query=4,
        depth_num=DEPTHS, position_dim=3 * DEPTHS, LID=True, depth_start=DEPTH_START,
        position_range=POSITION_RANGE, position_level=0,
    )  # fmt: skip
    head._init_layers()

    h, w = GRID
    generator = torch.Generator().manual_seed(0)
    cam_to_world = stand_ins.random_poses(generator, VIEWS)[None]
    K = intrinsics()
    img_feats = [torch.zeros(1, VIEWS, 4, h, w)]
    img_metas = [{'pad_shape': [(h * PATCH, w * PATCH, 3)] * VIEWS, 'lidar2img': lidar2img(K, cam_to_world)}]
    masks = torch.zeros(1, VIEWS, h, w, dtype=torch.bool)
    with torch.no_grad():
        embedding, _ = head.position_embeding(img_feats, img_metas, masks)  # (B, V, C, h, w)
    encoder = head.position_encoder
    record = {
        'reference': f'megvii-research/PETR@{COMMIT}:{HEAD}:PETRHead.position_embeding',
        'source_sha256': stand_ins.sha256(os.path.join(ROOT, HEAD)),
        'grid': list(GRID), 'patch_size': PATCH, 'num_depths': DEPTHS, 'embed_dims': EMBED,
        'depth_start': DEPTH_START, 'position_range': POSITION_RANGE,
        'cam_to_world': cam_to_world, 'K': K,
        'conv1_weight': encoder[0].weight.detach(), 'conv1_bias': encoder[0].bias.detach(),
        'conv2_weight': encoder[2].weight.detach(), 'conv2_bias': encoder[2].bias.detach(),
        'embedding': embedding,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)')


if __name__ == '__main__':
    main()
