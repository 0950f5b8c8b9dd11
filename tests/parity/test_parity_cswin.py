"""Parity with CSWin Transformer's LePE (microsoft/CSWin-Transformer; recorder: tools/parity/record_lepe.py):
``LePEAttention`` over the whole token map (a last-stage ``CSWinBlock``), softmax(q k^T / sqrt(d)) V + DWConv3x3(V),
then the output projection."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.attention import Attention
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('lepe',)


def attention(record: dict, with_lepe: bool = True) -> Attention:
    """vispe's attention with the recorded block's qkv and projection weights and, with ``with_lepe``, a lepe
    encoding holding its ``get_v`` conv; float64."""
    dim, heads = record['dim'], record['heads']
    encodings = {}
    if with_lepe:
        enc = build_encoding('lepe', dim=dim, num_heads=heads)
        with torch.no_grad():
            enc.conv.weight.copy_(record['conv_weight'])
            enc.conv.bias.copy_(record['conv_bias'])
        encodings['lepe'] = enc
    attn = Attention(dim, heads, qkv_bias=False, encodings=encodings).double().eval()
    with torch.no_grad():
        attn.qkv.weight.copy_(record['qkv_weight'])
        attn.proj.weight.copy_(record['proj_weight'])
        attn.proj.bias.copy_(record['proj_bias'])
    return attn


def test_lepe_attention_matches_cswin() -> None:
    """The attention branch of a last-stage CSWin block (4 x 4 tokens, 2 heads of 4 channels): from the same
    normalised tokens, vispe's attention with lepe returns the same tokens, in float64; without the conv term it
    would not (the test sees the term)."""
    record = recorded('lepe')
    pos = grid_positions(*record['grid'])
    with torch.no_grad():
        out = attention(record)(record['attn_input'], pos)
        plain = attention(record, with_lepe=False)(record['attn_input'], pos)
    torch.testing.assert_close(out, record['attn_output'], atol=1e-12, rtol=1e-12)
    assert (plain - record['attn_output']).abs().max() > 0.1


def test_lepe_gives_prefix_tokens_no_term() -> None:
    """A cls token in front (CSWin has none): the patch tokens' conv term is the one CSWin computes from their
    values alone, and the cls token's is zero."""
    record = recorded('lepe')
    enc = build_encoding('lepe', dim=record['dim'], num_heads=record['heads']).double()
    with torch.no_grad():
        enc.conv.weight.copy_(record['conv_weight'])
        enc.conv.bias.copy_(record['conv_bias'])
    heads, d = record['heads'], record['dim'] // record['heads']
    n = record['grid'][0] * record['grid'][1]
    v = torch.randn(2, heads, 1 + n, d, dtype=torch.float64)
    term = enc.value_term(v, grid_positions(*record['grid'], num_prefix=1))
    patches = enc.value_term(v[:, :, 1:], grid_positions(*record['grid']))
    assert torch.equal(term[:, :, 0], torch.zeros_like(term[:, :, 0]))
    torch.testing.assert_close(term[:, :, 1:], patches, atol=1e-12, rtol=1e-12)
