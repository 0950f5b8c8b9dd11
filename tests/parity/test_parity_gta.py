"""Parity with GTA's code (autonomousvision/gta, source/utils/gta.py: ``make_SO2mats`` and
``multihead_geometric_transform_attention``; recorder: tools/parity/record_gta.py): vispe's ``gta`` with
``so2='reference'`` gives the authors' attention weights and outputs on the same cameras, patches, q, k, v and
translation scale. The default ``so2='rope_axial'`` (rope_axial's ladder on integer token coordinates) is a stated
departure, and the test tells the two apart."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe import geometry as G
from vispe.positions import Cameras, Positions, grid_coords

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('gta',)


def reference_to_vispe(head_dim: int, freqs: int) -> torch.Tensor:
    """vispe's channel c holds the reference's channel index[c]. The SE(3) half is the same 4-blocks in the same
    order. In the SO(2) half the reference's pair m = 2 f + a turns axis a (0 row, 1 col) at frequency f; vispe's
    pairs are the col frequencies, then the row ones: a fixed permutation that the learned projections absorb."""
    se3 = head_dim // 2
    pairs = [2 * p + 1 for p in range(freqs)] + [2 * p for p in range(freqs)]  # col pairs, then row pairs
    so2 = [se3 + 2 * m + e for m in pairs for e in (0, 1)]
    return torch.tensor(list(range(se3)) + so2)


def vispe_attention(record: dict, so2: str, transform_values: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """vispe's gta around plain softmax attention, on the recorded inputs: (attention weights, output) in the
    reference's channel order."""
    heads, head_dim, (h, w), p = record['heads'], record['head_dim'], record['grid'], record['patch_size']
    poses = record['cam_to_world'].float()
    views = poses.shape[1]
    cameras = Cameras(
        G.intrinsics(torch.full((1, views), 20.0), h * p, w * p), poses,
        torch.arange(views).repeat_interleave(h * w), (h * p, w * p), p,
    )  # fmt: skip
    pos = Positions(grid_coords(h, w).repeat(views, 1), cameras=cameras)
    spec = {'type': 'gta', 'so2': so2, 'transform_values': transform_values}
    enc = build_encoding(spec, dim=heads * head_dim, num_heads=heads, ndim=2, grid_size=(h, w))
    with torch.no_grad():
        enc.translation_scale.fill_(record['translation_scale'])
    index = reference_to_vispe(head_dim, record['so2_freqs'])
    q, k, v = (record[name][..., index].float() for name in ('q', 'k', 'v'))
    q, k = enc.rotate(q, k, pos)
    attn = (q @ k.transpose(-2, -1) / head_dim**0.5).softmax(dim=-1)
    out = enc.transform_out(attn @ enc.transform_v(v, pos), pos)
    return attn, out[..., torch.argsort(index)]


def test_reference_frequencies_match_the_authors_attention() -> None:
    """Every attention weight and every output channel of the authors' attention, to float32 rounding."""
    record = recorded('gta')
    assert record['reference'].startswith('autonomousvision/gta@1dcbd37')
    attn, out = vispe_attention(record, 'reference')
    torch.testing.assert_close(attn.double(), record['attn'], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), record['out'], atol=1e-5, rtol=1e-5)


def test_untransformed_values_match_the_authors_v_transform_off() -> None:
    """``transform_values=False`` is the reference's ``v_transform=False``: values and output left as they are."""
    record = recorded('gta')
    _, out = vispe_attention(record, 'reference', transform_values=False)
    torch.testing.assert_close(out.double(), record['out_plain_values'], atol=1e-5, rtol=1e-5)
    assert (record['out_plain_values'] - record['out']).abs().max() > 0.1


def test_the_default_frequencies_differ_from_the_authors() -> None:
    """``so2='rope_axial'`` (vispe's default: theta 100 on integer token coordinates) is not the reference's
    2 pi 2^(j - n) on (p + 0.5) / P: the same inputs give other attention weights."""
    record = recorded('gta')
    attn, _ = vispe_attention(record, 'rope_axial')
    assert (attn.double() - record['attn']).abs().max() > 1e-2


def test_the_reference_coordinates_are_the_patch_centres() -> None:
    """The reference datasets' coordinates (make_2dcoord, subsampled) are vispe's (p + 0.5) / P per axis."""
    record = recorded('gta')
    h, w = record['grid']
    expected = (grid_coords(h, w).double() + 0.5) / torch.tensor([h, w], dtype=torch.float64)
    torch.testing.assert_close(record['coord'].reshape(-1, 2), expected, atol=1e-7, rtol=0)
