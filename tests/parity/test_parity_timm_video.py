"""``rope_axial`` on video grids (ndim=3) against timm 1.0.31's N-D axial rotary embedding (recorder:
tools/parity/record_rope_axial_video.py): every token-to-token logit of a 2 x 3 x 4 clip.

timm gives each axis of a (t, h, w) feature shape the same ladder 1/theta^(k/n) and lays the pairs out axis by axis
in (t, h, w) order; vispe lays them out column, row, time (its image layout, extended). The test permutes q's and
k's pairs from timm's order to vispe's, which leaves every logit as it is. ``rope_axial`` is claimed by the image
parity file; this one tests its video form only."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import video_positions

#: what this file holds parity for: none by name (rope_axial's image form is claimed elsewhere)
METHODS = ()


def to_vispe_pairs(x: torch.Tensor, pairs: int) -> torch.Tensor:
    """timm's interleaved pairs (t block, h block, w block) -> vispe's (w, h, t): whole pairs move, so q . k stays."""
    blocks = torch.arange(3 * pairs).reshape(3, pairs).flip(0).flatten()  # vispe pair j <- timm pair blocks[j]
    channels = torch.stack([2 * blocks, 2 * blocks + 1], -1).flatten()
    return x[..., channels]


def test_rope_axial_video_logits_match_timm() -> None:
    record = recorded('rope_axial_video')
    heads, head_dim = record['heads'], record['head_dim']
    enc = build_encoding(
        {'type': 'rope_axial', 'theta': record['theta']}, dim=heads * head_dim, num_heads=heads, ndim=3,
        grid_size=tuple(record['grid']),
    )  # fmt: skip
    pairs = head_dim // 6
    assert enc.sections == (pairs,) * 3  # the even split: timm gives every axis the same number of pairs
    q, k = to_vispe_pairs(record['q'], pairs), to_vispe_pairs(record['k'], pairs)
    q2, k2 = enc.rotate(q, k, video_positions(*record['grid']))
    logits = q2 @ k2.transpose(-2, -1)
    torch.testing.assert_close(logits, record['logits'], atol=1e-4, rtol=1e-5)
    # unpermuted, timm's time pairs would turn with the column: the layout matters, and the test sees it
    q3, k3 = enc.rotate(record['q'], record['k'], video_positions(*record['grid']))
    assert (q3 @ k3.transpose(-2, -1) - record['logits']).abs().max() > 0.1
