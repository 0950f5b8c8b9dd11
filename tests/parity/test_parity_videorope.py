"""Parity with the authors' VideoRoPE, Wiselnn570/VideoRoPE (recorder: tools/parity/record_videorope.py): its
position ids (``get_t_scale_rope_index``) and its rotation (``apply_m_modify_multimodal_rotary_pos_emb``) on a
2 x 3 x 4 clip of video tokens."""

from __future__ import annotations

import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.encodings.video_rope import COL, ROW, TIME
from vispe.positions import video_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('videorope',)


def videorope(record: dict, **options):
    heads, head_dim = record['heads'], record['head_dim']
    config = {'type': 'videorope', 'delta': record['delta'], **options}
    return build_encoding(config, dim=heads * head_dim, num_heads=heads, ndim=3, grid_size=tuple(record['grid']))


def logits(record: dict, **options) -> torch.Tensor:
    enc = videorope(record, **options)
    q, k = enc.rotate(interleaved(record['q']), interleaved(record['k']), video_positions(*record['grid']))
    return q @ k.transpose(-2, -1)


def test_videorope_logits_match_the_authors() -> None:
    """Every video-token-to-video-token logit, at the reference's theta (Qwen2-VL's 1e6). vispe's default theta
    (10000, a ViT's clips span tens of positions) gives others, so the test tells the two apart."""
    record = recorded('videorope')
    torch.testing.assert_close(logits(record, theta=record['theta']), record['logits'], atol=1e-4, rtol=1e-5)
    assert (logits(record) - record['logits']).abs().max() > 0.1


def test_videorope_reads_the_authors_axis_and_position_id_on_every_pair() -> None:
    """Each pair's axis (LTA: t on the lowest frequencies, h and w alternating from pair 0) is the one the authors'
    rotation reads, and its position id (DL and ATS: t_id = 2t, h_id = 2t + h - (H-1)//2, w_id = 2t + w - (W-1)//2)
    is theirs up to one offset for every pair and token (their ids count the vision-start token before the clip)."""
    record = recorded('videorope')
    enc = videorope(record)
    half = record['head_dim'] // 2
    ref_axis = record['channel_axis'][:half]  # rotate-half: pair i is channels i and i + d/2
    assert torch.equal(record['channel_axis'][half:], ref_axis)
    ours = {TIME: 0, ROW: 1, COL: 2}  # the reference indexes its ids t, h, w as vispe's coordinates
    assert [ours[a] for a in enc.axis.tolist()] == ref_axis.tolist()
    pos = video_positions(*record['grid'])
    ids = enc.channel_positions(pos.coords, pos.grid)  # (N, d/2)
    reference = record['position_ids'][ref_axis].T  # (N, d/2): the id each pair reads
    offset = reference - ids
    torch.testing.assert_close(offset, torch.full_like(offset, 1.0), atol=0, rtol=0)
