"""Parity with CROMA's 2D ALiBi (antofuller/CROMA; recorder: tools/parity/record_alibi2d.py): ``get_2dalibi``, the
bias -m_h ||p_i - p_j|| with ALiBi's slopes, and CROMA's ``Attention``, which adds it to the logits."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.attention import Attention
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('alibi2d',)


def bias(heads: int, grid: list[int], num_prefix: int = 0) -> torch.Tensor:
    """vispe's alibi2d bias for every token pair of the grid: (1, H, N, N), float32."""
    enc = build_encoding('alibi2d', num_heads=heads)
    n = num_prefix + grid[0] * grid[1]
    q = torch.zeros(1, heads, n, 4)
    return enc.logit_bias(q, q, grid_positions(*grid, num_prefix=num_prefix))


@pytest.mark.parametrize('heads', [8, 6])
def test_bias_matches_croma(heads: int) -> None:
    """CROMA's ``get_2dalibi`` on a 3 x 3 grid for 8 heads (slopes 2^-1 ... 2^-8) and 6 (not a power of two: the 4
    slopes of 4 heads, then every other slope of 8): the same bias for every patch pair, up to float32 rounding."""
    record = recorded('alibi2d')
    torch.testing.assert_close(bias(heads, record['grid']), record['biases'][str(heads)], atol=1e-6, rtol=1e-6)


def test_attention_with_the_bias_matches_croma() -> None:
    """CROMA's ``Attention`` (6 heads of 2 channels, its input LayerNorm's output recorded as the input): vispe's
    attention with alibi2d and the same qkv and output weights returns the same tokens; without the bias it would
    not."""
    record = recorded('alibi2d')
    heads, dim = record['heads'][1], record['dim']
    pos = grid_positions(*record['grid'])
    outs = []
    for encodings in ({'alibi2d': build_encoding('alibi2d', num_heads=heads)}, {}):
        attn = Attention(dim, heads, qkv_bias=False, encodings=encodings).double().eval()
        with torch.no_grad():
            attn.qkv.weight.copy_(record['qkv_weight'])
            attn.proj.weight.copy_(record['proj_weight'])
            attn.proj.bias.copy_(record['proj_bias'])
            outs.append(attn(record['attn_input'], pos))
    torch.testing.assert_close(outs[0], record['attn_output'], atol=1e-6, rtol=1e-6)
    assert (outs[1] - record['attn_output']).abs().max() > 0.05


def test_prefix_tokens_get_no_bias() -> None:
    """A cls token in front (CROMA has none; vispe gives prefix tokens no position): its row and column of the bias
    are zero, and the patch block is CROMA's."""
    record = recorded('alibi2d')
    ours = bias(8, record['grid'], num_prefix=1)
    assert torch.equal(ours[..., 0, :], torch.zeros_like(ours[..., 0, :]))
    assert torch.equal(ours[..., :, 0], torch.zeros_like(ours[..., :, 0]))
    torch.testing.assert_close(ours[..., 1:, 1:], record['biases']['8'], atol=1e-6, rtol=1e-6)
