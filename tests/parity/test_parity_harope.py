"""Parity with HARoPE's authors' code, Studentxll/HARoPE ``model/models_HARoPE.py`` (recorder:
tools/parity/record_harope.py): the logits (M q rotated) . (M^-T k rotated) for every token pair of a 3 x 4 latent
grid, and the attention's output tokens, with the reference's A_u, A_v and sigma copied into vispe's ``harope``.

Two conventions differ, neither changing what the encoding can express:

- channel order: the reference's axial RoPE turns the rows with the first half of the channels, vispe's (RoPEAxial)
  the columns; the test swaps the halves of q, k and of M's rows and columns (M -> P^T M P), which leaves every logit
  as it is;
- the reference's generators are (A - A^T) / 2 (``SVDBasedMatrix._skew``), vispe's ``generator_scale`` (A - A^T)
  with 1 by default: the default needs the reference's A halved, and ``generator_scale=0.5`` takes it as it is."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('harope',)


def outputs(record: dict, a_factor: float, **options) -> tuple[torch.Tensor, torch.Tensor]:
    """vispe's logits (1, H, N, N) and attention output (1, N, C) on the recorded tokens, with the reference's
    parameters (A times ``a_factor``) in vispe's channel order."""
    heads, head_dim = record['heads'], record['head_dim']
    enc = build_encoding(
        {'type': 'harope', 'theta': record['theta'], **options}, dim=heads * head_dim, num_heads=heads, ndim=2,
        grid_size=tuple(record['grid']),
    ).double()  # fmt: skip
    swap = (torch.arange(head_dim) + head_dim // 2) % head_dim  # vispe channel i = the reference's swap[i]
    with torch.no_grad():
        enc.A_u.copy_(record['A_u'][:, swap][:, :, swap] * a_factor)
        enc.A_v.copy_(record['A_v'][:, swap][:, :, swap] * a_factor)
        enc.sigma.copy_(record['sigma'][:, swap])
    x = record['x']

    def heads_of(w: torch.Tensor) -> torch.Tensor:  # (1, N, H d) -> (1, H, N, d) in vispe's channel order
        return (x @ w.T).unflatten(-1, (heads, head_dim)).transpose(1, 2)[..., swap]

    q, k = enc.rotate(heads_of(record['q_weight']), heads_of(record['k_weight']), grid_positions(*record['grid']))
    logits = q @ k.transpose(-1, -2)
    v = x.unflatten(-1, (heads, head_dim)).transpose(1, 2)  # the identity v projection
    out = ((logits * head_dim**-0.5).softmax(-1) @ v).transpose(1, 2).flatten(2)
    return logits, out


@pytest.mark.parametrize(('a_factor', 'options'), [(0.5, {}), (1.0, {'generator_scale': 0.5})])
def test_harope_matches_the_reference(a_factor, options) -> None:
    """Every logit and output token to float32 rounding (the reference's rotary tables and rotation are float32)."""
    record = recorded('harope')
    logits, out = outputs(record, a_factor, **options)
    torch.testing.assert_close(logits, record['logits'], atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(out, record['out'], atol=1e-5, rtol=1e-5)


def test_harope_default_generator_scale_differs_from_the_reference() -> None:
    """The reference's A as it is, under vispe's default generator_scale = 1: twice its generators, other logits."""
    record = recorded('harope')
    logits, _ = outputs(record, 1.0)
    assert (logits - record['logits']).abs().max() > 0.1
