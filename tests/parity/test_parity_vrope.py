"""Parity with the authors' VRoPE, johncaged/VRoPE (recorder: tools/parity/record_vrope.py): the per-pair position
ids of ``VRoPE.generate_nd_positions`` and the logits of q and k rotated by them (the repository has no rotation of
its own: transformers' Qwen2 RoPE turns pair i by id_i * theta^(-2i/d)) on a 2 x 3 x 4 clip."""

from __future__ import annotations

import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.positions import video_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('vrope',)


def vrope(record: dict, **options):
    heads, head_dim = record['heads'], record['head_dim']
    config = {'type': 'vrope', 'theta': record['theta'], **options}
    return build_encoding(config, dim=heads * head_dim, num_heads=heads, ndim=3)


def test_vrope_position_ids_are_the_authors() -> None:
    """Every pair's id for every token, exactly: the four diagonals h + w, h + (W-1-w), (H-1-h) + w,
    (H-1-h) + (W-1-w) on pairs i mod 4, each frame shifted by H + W - 1."""
    record = recorded('vrope')
    enc = vrope(record)
    pos = video_positions(*record['grid'])
    ids = enc.channel_positions(pos.coords, pos.grid)
    torch.testing.assert_close(ids, record['position_ids'].float(), atol=0, rtol=0)


def test_vrope_logits_match_the_authors() -> None:
    """Every token-to-token logit. ``time_stride='train'`` with another training grid (4 x 5 frames: stride 8, not
    the clip's 6) gives others, so the test tells the option from the authors' stride."""
    record = recorded('vrope')
    pos = video_positions(*record['grid'])
    q, k = interleaved(record['q']), interleaved(record['k'])
    q2, k2 = vrope(record).rotate(q, k, pos)
    torch.testing.assert_close(q2 @ k2.transpose(-2, -1), record['logits'], atol=1e-4, rtol=1e-5)
    enc = build_encoding(
        {'type': 'vrope', 'theta': record['theta'], 'time_stride': 'train'},
        dim=record['heads'] * record['head_dim'], num_heads=record['heads'], ndim=3, grid_size=(2, 4, 5),
    )  # fmt: skip
    q3, k3 = enc.rotate(q, k, pos)
    assert (q3 @ k3.transpose(-2, -1) - record['logits']).abs().max() > 0.1
