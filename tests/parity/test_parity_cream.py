"""Parity with iRPE's authors' code, microsoft/Cream ``iRPE/DeiT-with-iRPE/irpe.py`` (recorder:
tools/parity/record_irpe.py): the logit terms on Q and K and the value term, for vispe's default configuration
(product buckets, contextual, on K, shared by the heads) and for the other methods and modes, on a 3 x 5 grid with a
cls token, with the reference's lookup tables copied into vispe's."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe.encodings.irpe import IRPE, bucket_ids, piecewise_coefficients
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('irpe',)

#: the recorder's configuration names -> vispe's options
OPTIONS = {
    'product_contextual_k_shared': {},  # vispe's defaults
    'product_contextual_qkv_heads': {'on': 'qkv', 'shared_heads': False},
    'cross_bias_k_heads': {'method': 'cross', 'mode': 'bias', 'shared_heads': False},
    'cross_contextual_qk_shared': {'method': 'cross', 'on': 'qk'},
    'euclidean_contextual_k_shared': {'method': 'euclidean'},
    'quant_contextual_k_shared': {'method': 'quant'},  # at ratio 3 (the others 1.9): gamma decides its buckets
}


def vispe_table(reference: torch.Tensor, side: str, mode: str, shared: bool, skip_first: int) -> torch.Tensor:
    """The reference's table in vispe's layout: contextual Q / K (H or 1, d, buckets) -> (buckets, d) or
    (H, buckets, d); V (H or 1, buckets, d) and bias (H or 1, buckets) keep theirs. ``skip_first`` drops the
    buckets a non-negative distance never reaches (euclidean, quant: the reference's ids start at b)."""
    table = reference.transpose(-1, -2) if mode == 'contextual' and side in 'qk' else reference
    table = table[0] if shared else table
    axis = -2 if mode == 'contextual' else -1
    return table.narrow(axis, skip_first, table.shape[axis] - skip_first)


def build(record: dict, name: str) -> IRPE:
    heads, head_dim = record['heads'], record['head_dim']
    ratio = record[f'{name}/ratio']
    enc = IRPE(heads * head_dim, heads, ratio=ratio, **OPTIONS[name]).double()
    b = int(piecewise_coefficients(ratio)[1])
    skip_first = b if enc.method in ('euclidean', 'quant') else 0
    with torch.no_grad():
        for key, table in enc.tables.items():
            reference = record[f'{name}/table_{key}']
            table.copy_(vispe_table(reference, key[0], enc.mode, enc.shared_heads, skip_first))
    return enc


@pytest.mark.parametrize('name', list(OPTIONS))
def test_irpe_logit_terms_match_the_reference(name) -> None:
    """scale * q . W_k[bucket(i, j)] (+ scale * k . W_q[bucket(j, i)]), or the scalar bias, for every token pair,
    cls rows and columns included: equal to the reference's to float64 rounding."""
    record = recorded('irpe')
    enc = build(record, name)
    pos = grid_positions(*record['grid'], num_prefix=record['num_prefix'])
    bias = enc.logit_bias(record['q'], record['k'], pos)
    torch.testing.assert_close(bias.expand_as(record[f'{name}/bias']), record[f'{name}/bias'], atol=1e-12, rtol=1e-12)


def test_irpe_value_term_matches_the_reference() -> None:
    """iRPE on V: sum_j a_ij W_v[bucket(i, j)] for every query, from the same softmax weights."""
    record, name = recorded('irpe'), 'product_contextual_qkv_heads'
    enc = build(record, name)
    pos = grid_positions(*record['grid'], num_prefix=record['num_prefix'])
    out = enc.value_term(record['v'], pos, record['attn'])
    torch.testing.assert_close(out, record[f'{name}/value_term'], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize('name', list(OPTIONS))
def test_irpe_buckets_match_the_reference(name) -> None:
    """The bucket of every pair (the piecewise index g of Eq. 18 and the prefix bucket). euclidean and quant number
    the b + 1 reachable buckets from 0 where the reference starts at b (it allocates 2b + 1), and put the prefix
    bucket right after them; cross is compared on its row table."""
    record = recorded('irpe')
    method = OPTIONS[name].get('method', 'product')
    ratio = record[f'{name}/ratio']
    ours = bucket_ids(*record['grid'], method, ratio, num_prefix=record['num_prefix'])
    ours = ours[0] if method == 'cross' else ours
    theirs = record[f'{name}/bucket_ids'].long()
    if method in ('euclidean', 'quant'):
        b = int(piecewise_coefficients(ratio)[1])
        theirs = torch.where(theirs == record[f'{name}/num_buckets'] - 1, b + 1, theirs - b)
    assert torch.equal(ours, theirs)
