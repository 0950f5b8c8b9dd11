"""Parity with 3DPPE's code (drilistbox/3DPPE, projects/mmdet3d_plugin/models/dense_heads/petr_depth_head.py:
``PETRDepthHeadV2.position_embeding``; recorder: tools/parity/record_3dppe.py): vispe's ``3dppe`` with the same
depth per token (``depth_source='gt'``) and ``anchor='corner'`` adds the authors' point embedding to every token of
two views, with the authors' encoder weights copied in. The default ``anchor='centre'`` (the point on the ray through
the patch centre) is a stated departure, and the test tells the two apart. Not compared: the depth network, which
departs by design (an MLP on the patch embedding instead of the reference's camera-aware conv net)."""

from __future__ import annotations

import torch
from recorded import recorded, view_tokens

from vispe import build_encoding
from vispe.positions import Cameras, Positions, grid_coords

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('3dppe',)


def vispe_3dppe(record: dict, anchor: str) -> torch.Tensor:
    """The table vispe's 3dppe adds to the tokens (B, V h w, C), the recorded weights copied in."""
    (h, w), p, dim = record['grid'], record['patch_size'], record['embed_dims']
    poses = record['cam_to_world'].float()
    views = poses.shape[1]
    cameras = Cameras(
        record['K'].float(), poses, torch.arange(views).repeat_interleave(h * w), (h * p, w * p), p,
        depth=record['depth'].float(),
    )  # fmt: skip
    pos = Positions(grid_coords(h, w).repeat(views, 1), cameras=cameras)
    box = record['position_range']
    enc = build_encoding(
        {'type': '3dppe', 'depth_source': 'gt', 'depth_range': (record['depth_start'], box[3]), 'scene_range': box,
         'anchor': anchor},
        dim=dim, ndim=2, grid_size=(h, w),
    )  # fmt: skip
    with torch.no_grad():
        for linear, name in ((enc.encoder[0], 'linear1'), (enc.encoder[2], 'linear2')):
            linear.weight.copy_(record[f'{name}_weight'])
            linear.bias.copy_(record[f'{name}_bias'])
        x = torch.zeros(1, views * h * w, dim)
        return enc.embed(x, pos) - x


def test_corner_anchor_matches_the_authors_embedding() -> None:
    """Every token's embedding, channel by channel (values of order 0.1-1), to float32 rounding."""
    record = recorded('3dppe')
    assert record['reference'].startswith('drilistbox/3DPPE@a49bdc4')
    torch.testing.assert_close(vispe_3dppe(record, 'corner'), view_tokens(record['embedding']), atol=1e-5, rtol=1e-5)


def test_the_default_patch_centres_differ_from_the_authors_corners() -> None:
    record = recorded('3dppe')
    assert (vispe_3dppe(record, 'centre') - view_tokens(record['embedding'])).abs().max() > 1e-3
