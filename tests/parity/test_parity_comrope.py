"""Parity with ComRoPE's authors' code, Longin-Yu/ComRoPE ``model.py`` (recorder: tools/parity/record_comrope.py):
the attention weights of ``ComRoPEAPAttention`` / ``ComRoPELDAttention`` (dense R(x) = exp(sum_i x_i A_i) per token,
multiplied into q and k) on a 4 x 4 grid with a cls token, block sizes 2, 4 and 8, with the reference's generators
copied into vispe's ``comrope_ap`` and ``comrope_ld``.

The reference places its cls token at the normalised position (0.5, 0.5), the image centre; vispe's default gives
prefix tokens the identity (position 0), and ``prefix_position=0.5`` reproduces the reference: both are tested."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('comrope_ap', 'comrope_ld')


def attention_weights(record: dict, name: str, block: int, **options) -> torch.Tensor:
    """softmax(R q . R k / sqrt(d)) from vispe, on the recorded tokens, projections and generators (float64)."""
    heads, head_dim = record['heads'], record['head_dim']
    enc = build_encoding(
        {'type': name, 'block_size': block, **options}, dim=heads * head_dim, num_heads=heads, ndim=2,
        grid_size=tuple(record['grid']),
    ).double()  # fmt: skip
    with torch.no_grad():
        enc.P.copy_(record[f'b{block}/freqs'][:, 0])  # (H, 1, J, b, b) -> (H, J, b, b)
        if name == 'comrope_ld':
            enc.theta.copy_(record[f'b{block}/multiplier'][0, :, :, 0, 0])  # (1, ndim, J, 1, 1) -> (ndim, J)
    tokens = record['tokens']

    def split(x: torch.Tensor) -> torch.Tensor:  # (1, N, H d) -> (1, H, N, d), as the reference's heads
        return x.unflatten(-1, (heads, head_dim)).transpose(1, 2)

    q = split(tokens @ record['q_weight'].T + record['q_bias'])
    k = split(tokens @ record['k_weight'].T + record['k_bias'])
    q, k = enc.rotate(q, k, grid_positions(*record['grid'], num_prefix=record['num_prefix']))
    return (q @ k.transpose(-1, -2) * head_dim**-0.5).softmax(-1)


@pytest.mark.parametrize('block', [2, 4, 8])
@pytest.mark.parametrize('name', METHODS)
def test_comrope_matches_the_reference_with_its_cls_position(name, block) -> None:
    """With the cls token at (0.5, 0.5), as the reference: the same softmax weights for every token pair, to
    float32 rounding (vispe computes its angles and rotations in float32 whatever q's dtype; the reference here in
    float64)."""
    record = recorded(name)
    ours = attention_weights(record, name, block, prefix_position=record['cls_position'])
    torch.testing.assert_close(ours, record[f'b{block}/attn'], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize('name', METHODS)
def test_comrope_default_cls_identity_differs_from_the_reference(name) -> None:
    """vispe's default leaves the cls token unrotated (position 0), so its rows and columns differ from the
    reference's, and with them the softmax of every row."""
    record = recorded(name)
    ours = attention_weights(record, name, 4)
    assert (ours - record['b4/attn']).abs().max() > 1e-3
