"""Parity with CPVT's PEG as its authors released it, in Meituan-AutoML/Twins (recorder:
tools/parity/record_peg.py): ``gvt.PosCNN``, x + DWConv3x3(x) over the token grid."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('peg',)


def peg(record: dict) -> torch.nn.Module:
    """vispe's peg with the recorded conv weights, in float64."""
    enc = build_encoding('peg', dim=record['dim']).double()
    with torch.no_grad():
        enc.proj.weight.copy_(record['weight'])
        enc.proj.bias.copy_(record['bias'])
    return enc


def test_peg_matches_twins_poscnn() -> None:
    """Twins' ``PosCNN`` on a 3 x 4 token grid (not square: rows and columns cannot be swapped unseen): the tokens
    vispe's peg passes on equal PosCNN's, in float64; and PEG follows block 0, where ``CPVTV2`` puts it."""
    record = recorded('peg')
    enc = peg(record)
    assert enc.blocks == (0,)
    out = enc.after_block(record['x'], grid_positions(*record['grid']))
    torch.testing.assert_close(out, record['out'], atol=1e-12, rtol=1e-12)
    transposed = record['x'].reshape(-1, *record['grid'], record['dim']).transpose(1, 2)  # the grid read as 4 x 3
    wrong = enc.after_block(transposed.flatten(1, 2), grid_positions(*reversed(record['grid'])))
    wrong = wrong.reshape(-1, *reversed(record['grid']), record['dim']).transpose(1, 2).flatten(1, 2)
    assert (wrong - record['out']).abs().max() > 0.1  # a transposed kernel would not pass


def test_peg_passes_prefix_tokens_through() -> None:
    """With a cls token in front (the CPVT paper's ViT splits it off before the PEG and puts it back; Twins' CPVTV2
    has none), the patch tokens still equal PosCNN's and the cls token is unchanged."""
    record = recorded('peg')
    x = record['x']
    cls = torch.randn(x.shape[0], 1, x.shape[-1], dtype=x.dtype)
    out = peg(record).after_block(torch.cat([cls, x], dim=1), grid_positions(*record['grid'], num_prefix=1))
    assert torch.equal(out[:, :1], cls)
    torch.testing.assert_close(out[:, 1:], record['out'], atol=1e-12, rtol=1e-12)
