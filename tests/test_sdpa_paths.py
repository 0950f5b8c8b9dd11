"""Which attention path each encoding leaves the model on: fused SDPA without a mask (flash or memory-efficient on
CUDA), SDPA with a float bias (memory-efficient), or materialised softmax weights. Checked on CPU by recording the
calls to ``F.scaled_dot_product_attention``; the GPU check confirms the kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_compile import model_and_inputs

import vispe
from vispe.encodings.build import encoding_class

#: encodings that add a logit bias (their class implements the hook): SDPA gets a float attn_mask
BIAS = {name for name in vispe.list_encodings() if 'logit_bias' in encoding_class(name).hooks()}


def sdpa_calls(name, monkeypatch, **spec):
    """(number of forward attention layers, the attn_mask of each SDPA call) for a tiny model with ``name``."""
    calls = []
    original = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kwargs):
        calls.append(attn_mask)
        return original(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', recording)
    model, inputs = model_and_inputs(dict(type=name, **spec) if spec else name)
    with torch.no_grad():
        model.eval()(*inputs)
    return len(model.blocks), calls


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_encodings_keep_fused_attention(name: str, monkeypatch) -> None:
    layers, calls = sdpa_calls(name, monkeypatch)
    assert len(calls) == layers, f'{name}: attention weights were materialised instead of fused SDPA'
    if name in BIAS:
        assert all(m is not None and m.dtype.is_floating_point for m in calls)
    else:
        assert all(m is None for m in calls), f'{name} passes a mask, which rules out the flash kernel'
    assert not encoding_class(name).needs_attn_weights


def test_irpe_on_values_materialises_the_weights(monkeypatch) -> None:
    """iRPE's value term sums over the attention weights: the one path that cannot stay fused."""
    _, calls = sdpa_calls('irpe', monkeypatch, on='qkv')
    assert calls == []
