"""Parity with the LaPE authors' code, Ingrid725/LaPE (recorder: tools/parity/record_lape.py): the attention input
of every block of their DeiT with ``join_type='LaPE'``, LN_l(x_l) + P_l with P_l = LN'_l(P_(l-1)).

LaPE is an option of the absolute encodings (``lape=True``, ``vispe.encodings.lape.LayerAdaptive``), not a
registered name, so this file claims no method in ``METHODS``; it is tested here on ``ape_learned``, the learned
table of the reference. vispe's hook is run on the reference's own normalised input of each block, so that the
comparison is of what LaPE adds, block by block, in float64. Departures (tested as such): the default chains no
norms (``lape_progressive=False``: block l reads LN'_l(P)), and the cls token gets no position."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: none by name (LaPE is the option lape=True of the absolute encodings)
METHODS = ()


def lape_inputs(record: dict, progressive: bool) -> list[torch.Tensor]:
    """vispe's attention input of each block, given the reference's normalised input of that block."""
    config = {'type': 'ape_learned', 'lape': True, 'lape_progressive': progressive, 'depth': record['depth']}
    enc = build_encoding(config, dim=record['dim'], grid_size=tuple(record['grid'])).double()
    with torch.no_grad():
        enc.pos_embed.copy_(record['pos_embed'][:, 1:])  # the patch rows: vispe's table has no cls entry
        for norm, weight, bias in zip(enc.lape_norms, record['norm_weight'], record['norm_bias']):
            norm.weight.copy_(weight)
            norm.bias.copy_(bias)
    pos = grid_positions(*record['grid'], num_prefix=1)
    return [enc.attn_input(x, pos, i) for i, x in enumerate(record['normed'])]


def test_lape_progressive_is_the_authors_attention_input_of_every_block() -> None:
    record = recorded('lape')
    ours = lape_inputs(record, progressive=True)
    for i, (x, normed, reference) in enumerate(zip(ours, record['normed'], record['attn_input'])):
        torch.testing.assert_close(x[:, 1:], reference[:, 1:], atol=1e-12, rtol=1e-12, msg=f'block {i}')
        # the cls token: the reference adds its own entry's norm, vispe nothing (prefix tokens carry no position)
        torch.testing.assert_close(x[:, :1], normed[:, :1], atol=0, rtol=0)
        assert (reference[:, :1] - normed[:, :1]).abs().max() > 0.1


def test_lape_default_reads_each_norm_of_the_table_and_differs_after_the_first_block() -> None:
    """vispe's default, LN'_l(P) at every block: the reference's at block 0 (nothing chained yet), another input
    at the later blocks, so the test tells the two apart."""
    record = recorded('lape')
    ours = lape_inputs(record, progressive=False)
    torch.testing.assert_close(ours[0][:, 1:], record['attn_input'][0][:, 1:], atol=1e-12, rtol=1e-12)
    for x, reference in zip(ours[1:], record['attn_input'][1:]):
        assert (x[:, 1:] - reference[:, 1:]).abs().max() > 0.1
