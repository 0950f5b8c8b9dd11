"""``ape_sincos`` on video grids (ndim=3) against MAE's sin-cos blocks, facebookresearch/mae ``util/pos_embed.py``
(recorder: tools/parity/record_sincos_video.py), on a 2 x 3 x 3 clip at width 48.

vispe's 3D table is its own composition, a third of the frequency pairs per axis (``rotary_sections``): the column,
the row, then time. No reference defines that split (MAE's video follow-ups learn their tables; other 3D sin-cos
tables give time a quarter or a third of the width in various orders). What MAE does define is each part, and the
test checks those: per frame, the spatial channels are MAE's 2D table of the frame (column, then row), and the last
channels MAE's 1D table of the frame index. ``ape_sincos`` is claimed by the image parity file."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import video_positions

#: what this file holds parity for: none by name (ape_sincos's image form is claimed elsewhere)
METHODS = ()


def test_ape_sincos_video_is_mae_2d_per_frame_then_mae_1d_of_time() -> None:
    record = recorded('sincos_video')
    t, h, w = record['grid']
    spatial, temporal = record['spatial'], record['temporal']
    dim = spatial.shape[-1] + temporal.shape[-1]
    enc = build_encoding('ape_sincos', dim=dim, ndim=3)
    ours = enc.position_table(video_positions(t, h, w), torch.float32).double().reshape(t, h * w, dim)
    expected = torch.cat([spatial.expand(t, -1, -1), temporal[:, None].expand(-1, h * w, -1)], dim=-1)
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=1e-6)  # vispe computes the table in float32
