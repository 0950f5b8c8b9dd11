"""Parity with PRoPE's code (liruilong940607/prope, prope/per_img_camera.py: ``PropeDotProductAttention``; recorder:
tools/parity/record_prope.py): vispe's ``prope`` gives the authors' logits for every token pair and their attention
outputs, with intrinsics and without, on two views with non-square pixels and off-centre principal points.

vispe keeps the intrinsics' skew, which the reference drops (a stated departure; ``skew=False`` drops it too): with a
skewed K the reference gives its zero-skew result, vispe's default another, and ``skew=False`` the reference's."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import Cameras, Positions, grid_coords

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('prope',)


def reference_to_vispe(head_dim: int) -> torch.Tensor:
    """vispe's channel c holds the reference's channel index[c]: the projective half as it is; in each d/4 RoPE block
    the reference pairs j with j + n (n = d/8) and turns by -angle, vispe pairs (2j, 2j + 1) and turns by +angle,
    so the reference's pair (j, j + n) is vispe's (2j + 1, 2j)."""
    n, index = head_dim // 8, list(range(head_dim // 2))
    for start in (head_dim // 2, 3 * head_dim // 4):
        for j in range(n):
            index += [start + n + j, start + j]
    return torch.tensor(index)


def vispe_prope(record: dict, K: torch.Tensor, **options) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits q' k'^T, output in the reference's channel order) of vispe's prope on the recorded inputs."""
    heads, head_dim, (h, w), p = record['heads'], record['head_dim'], record['grid'], record['patch_size']
    poses = record['cam_to_world'].float()
    views = poses.shape[1]
    cameras = Cameras(K.float(), poses, torch.arange(views).repeat_interleave(h * w), (h * p, w * p), p)
    pos = Positions(grid_coords(h, w).repeat(views, 1), cameras=cameras)
    enc = build_encoding({'type': 'prope', **options}, dim=heads * head_dim, num_heads=heads, ndim=2, grid_size=(h, w))
    index = reference_to_vispe(head_dim)
    q, k, v = (record[name][..., index].float() for name in ('q', 'k', 'v'))
    q, k = enc.rotate(q, k, pos)
    attn = (q @ k.transpose(-2, -1) / head_dim**0.5).softmax(dim=-1)
    out = enc.transform_out(attn @ enc.transform_v(v, pos), pos)
    return (q @ k.transpose(-2, -1)).double(), out[..., torch.argsort(index)].double()


@pytest.mark.parametrize(('camera', 'options'), [('K', {}), ('no_K', {'intrinsics': False})])
def test_logits_and_outputs_match_the_authors_attention(camera: str, options: dict) -> None:
    """Every logit (unscaled, of order 10) and every output channel, to float32 rounding."""
    record = recorded('prope')
    assert record['reference'].startswith('liruilong940607/prope@a601c22')
    logits, out = vispe_prope(record, record['K'], **options)
    torch.testing.assert_close(logits, record[f'logits_{camera}'], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(out, record[f'out_{camera}'], atol=1e-5, rtol=1e-5)


def test_skew_is_kept_unless_dropped_as_the_reference_does() -> None:
    """A skewed K: the reference reads f_x, f_y, c_x, c_y only (its K' and K'^-1 assume no skew), so its result is
    the zero-skew one; vispe's default keeps the skew in the projection and differs; ``skew=False`` matches."""
    record = recorded('prope')
    torch.testing.assert_close(record['out_K_skew'], record['out_K'], atol=0, rtol=0)
    logits, out = vispe_prope(record, record['K_skew'], skew=False)
    torch.testing.assert_close(logits, record['logits_K_skew'], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(out, record['out_K_skew'], atol=1e-5, rtol=1e-5)
    logits, out = vispe_prope(record, record['K_skew'])
    assert (logits - record['logits_K_skew']).abs().max() > 0.1
    assert (out - record['out_K_skew']).abs().max() > 1e-3
