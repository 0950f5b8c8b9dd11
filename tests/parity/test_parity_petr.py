"""Parity with PETR's code (megvii-research/PETR, projects/mmdet3d_plugin/models/dense_heads/petr_head.py:
``PETRHead.position_embeding``; recorder: tools/parity/record_petr.py): vispe's ``petr`` with ``anchor='corner'``
adds the authors' 3D position embedding to every token of two views, with the authors' position-encoder weights
copied in. The default ``anchor='centre'`` (rays through the patch centres) is a stated departure, and the test
tells the two apart."""

from __future__ import annotations

import torch
from recorded import recorded, view_tokens

from vispe import build_encoding
from vispe.positions import Cameras, Positions, grid_coords

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('petr',)


def vispe_petr(record: dict, anchor: str) -> torch.Tensor:
    """The table vispe's petr adds to the tokens (B, V h w, C), the recorded weights copied in."""
    (h, w), p, dim = record['grid'], record['patch_size'], record['embed_dims']
    poses = record['cam_to_world'].float()
    views = poses.shape[1]
    cameras = Cameras(record['K'].float(), poses, torch.arange(views).repeat_interleave(h * w), (h * p, w * p), p)
    pos = Positions(grid_coords(h, w).repeat(views, 1), cameras=cameras)
    box = record['position_range']
    enc = build_encoding(
        {'type': 'petr', 'num_depths': record['num_depths'], 'depth_range': (record['depth_start'], box[3]),
         'scene_range': box, 'hidden_dim': 4 * dim, 'anchor': anchor},
        dim=dim, ndim=2, grid_size=(h, w),
    )  # fmt: skip
    with torch.no_grad():
        for linear, name in ((enc.mlp[0], 'conv1'), (enc.mlp[2], 'conv2')):  # a 1x1 conv is a per-token linear
            linear.weight.copy_(record[f'{name}_weight'].flatten(1))
            linear.bias.copy_(record[f'{name}_bias'])
        x = torch.zeros(1, views * h * w, dim)
        return enc.embed(x, pos) - x


def test_corner_anchor_matches_the_authors_embedding() -> None:
    """Every token's embedding, channel by channel (values of order 0.1-1), to float32 rounding."""
    record = recorded('petr')
    assert record['reference'].startswith('megvii-research/PETR@f7525f9')
    torch.testing.assert_close(vispe_petr(record, 'corner'), view_tokens(record['embedding']), atol=1e-5, rtol=1e-5)


def test_the_default_patch_centres_differ_from_the_authors_corners() -> None:
    record = recorded('petr')
    assert (vispe_petr(record, 'centre') - view_tokens(record['embedding'])).abs().max() > 1e-3
