"""Parity of ``mrope``'s default interleaved layout with Qwen3-VL's M-RoPE (Hugging Face transformers v4.57.1,
``models/qwen3_vl/modeling_qwen3_vl.py``: ``Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope`` and
``apply_rotary_pos_emb``; recorder: tools/parity/record_mrope_interleaved.py), which timm's ``RotaryEmbeddingMRope``
ports. ``mrope`` is claimed by test_parity_transformers.py (its ``sections`` layout, Qwen2-VL), so this file claims
no name: it adds the default layout's comparison.

Qwen3-VL pairs channel i with i + d/2 (rotate-half): q and k go in through ``interleaved``."""

from __future__ import annotations

import pytest
import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.positions import video_positions

#: what this file holds parity for: nothing it alone claims (mrope: test_parity_transformers.py)
METHODS = ()


def mrope_logits(record: dict, section, layout: str | None = None, theta: float | None = None) -> torch.Tensor:
    """vispe's mrope logits on the record's clip: ``layout`` and ``theta`` left at vispe's defaults when None."""
    heads, head_dim = record['heads'], record['head_dim']
    spec = {'type': 'mrope', 'mrope_section': tuple(section)}
    spec.update({k: v for k, v in (('layout', layout), ('theta', theta)) if v is not None})
    enc = build_encoding(spec, dim=heads * head_dim, num_heads=heads, ndim=3, grid_size=tuple(record['grid']))
    q, k = enc.rotate(interleaved(record['q']), interleaved(record['k']), video_positions(*record['grid']))
    return q @ k.transpose(-2, -1)


@pytest.mark.parametrize('name', ['6_5_5', '4_3_3', 'qwen3_theta'])
def test_mrope_default_layout_matches_qwen3_vl(name) -> None:
    """The default layout (no ``layout`` given) gives Qwen3-VL's logits for every token pair of a 2 x 3 x 4 clip,
    with sections that fill the 16 pairs and with sections whose strides stop early (the pairs left read t), at
    theta 10000 and at Qwen3-VL's 5e6."""
    record = recorded('mrope_interleaved')
    case = record['cases'][name]
    ours = mrope_logits(record, case['mrope_section'], theta=case['theta'])
    torch.testing.assert_close(ours, case['logits'], atol=1e-4, rtol=1e-5)


def test_default_theta_is_timms_not_qwen3_vls() -> None:
    """vispe's default theta is timm's 10000 (that of the first two cases), not Qwen3-VL's 5e6: left at its default,
    vispe gives the 10000 case's logits, which differ from Qwen3-VL's at its own base."""
    record = recorded('mrope_interleaved')
    case = record['cases']['qwen3_theta']
    assert case['theta'] == 5e6
    ours = mrope_logits(record, case['mrope_section'])
    torch.testing.assert_close(ours, record['cases']['6_5_5']['logits'], atol=1e-4, rtol=1e-5)
    assert (ours - case['logits']).abs().max() > 0.1


def test_the_two_layouts_differ() -> None:
    """Qwen2-VL's contiguous ``sections`` on the same sections give other logits: the test tells the layouts apart."""
    record = recorded('mrope_interleaved')
    case = record['cases']['6_5_5']
    ours = mrope_logits(record, case['mrope_section'], 'sections', theta=case['theta'])
    assert (ours - case['logits']).abs().max() > 0.1
    # the two cases differ too, if little: the pairs they give differently turn slowly at theta 10000
    assert (record['cases']['4_3_3']['logits'] - case['logits']).abs().max() > 0.01
