"""Parity with Hugging Face transformers v4.57.1 (recorders: tools/parity/record_mrope.py, record_yarn.py):
Qwen2-VL's M-RoPE (``mrope`` with ``layout='sections'``) and YaRN's attention temperature."""

from __future__ import annotations

import math

import pytest
import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.encodings.rotary import yarn_mscale
from vispe.positions import grid_positions, video_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('mrope', 'strategy:yarn')


def mrope_logits(record: dict, layout: str) -> torch.Tensor:
    heads, head_dim = record['heads'], record['head_dim']
    enc = build_encoding(
        {'type': 'mrope', 'layout': layout, 'mrope_section': record['mrope_section'], 'theta': record['theta']},
        dim=heads * head_dim, num_heads=heads, ndim=3, grid_size=tuple(record['grid']),
    )  # fmt: skip
    q, k = enc.rotate(interleaved(record['q']), interleaved(record['k']), video_positions(*record['grid']))
    return q @ k.transpose(-2, -1)


def test_mrope_sections_matches_qwen2_vl() -> None:
    """Qwen2-VL's ``apply_multimodal_rotary_pos_emb`` (transformers v4.57.1): the same logits for every token pair of
    a 2 x 3 x 4 clip; the default interleaved layout (timm, Qwen3-VL) gives others, so the test tells the two apart."""
    record = recorded('mrope_sections')
    torch.testing.assert_close(mrope_logits(record, 'sections'), record['logits'], atol=1e-4, rtol=1e-5)
    assert (mrope_logits(record, 'interleaved') - record['logits']).abs().max() > 0.1


def test_mrope_sections_take_contiguous_blocks_that_fill_the_pairs() -> None:
    enc = build_encoding({'type': 'mrope', 'layout': 'sections', 'mrope_section': (4, 6, 6)}, dim=64, num_heads=2)
    assert enc.axis.tolist() == [0] * 4 + [1] * 6 + [2] * 6  # t, then h, then w: Qwen2-VL's blocks
    with pytest.raises(ValueError, match=r"layout='sections' needs mrope_section to sum to the head dim's 16 pairs"):
        build_encoding({'type': 'mrope', 'layout': 'sections', 'mrope_section': (8, 12, 12)}, dim=64, num_heads=2)
    with pytest.raises(ValueError, match=r"mrope layout must be one of \('interleaved', 'sections'\)"):
        build_encoding({'type': 'mrope', 'layout': 'blocks'}, dim=64, num_heads=2)


def test_yarn_temperature_matches_the_reference_and_the_paper() -> None:
    """YaRN (Peng et al. 2023): sqrt(1/t) = 0.1 ln s + 1 multiplies q and k each, so the logits grow by its square.
    Recorded: transformers' ``_compute_yarn_parameters`` attention factor (it scales cos and sin). Before: vispe
    multiplied q and k by the square root of it, so its logits grew by 0.1 ln s + 1 only (6.5% short at s = 2)."""
    record = recorded('yarn_temperature')
    ours = torch.tensor([yarn_mscale(float(s)) for s in record['scales']], dtype=torch.float64)
    torch.testing.assert_close(ours, record['attention_factor'], rtol=1e-6, atol=0)
    paper = 0.1 * torch.log(record['scales']) + 1
    torch.testing.assert_close(ours, paper, rtol=1e-12, atol=0)


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed'])
def test_yarn_grows_every_logit_by_the_temperature_squared(name) -> None:
    """At twice the training grid on both axes (s = 2), q and k come out each (0.1 ln 2 + 1) times longer than
    rotated (a rotation keeps lengths): every patch-to-patch logit is (0.1 ln 2 + 1)^2 times its unscaled value."""
    enc = build_encoding({'type': name, 'strategy': 'yarn'}, dim=64, num_heads=2, ndim=2, grid_size=(4, 4))
    pos = grid_positions(8, 8, num_prefix=1)
    q, k = torch.randn(1, 2, 65, 32), torch.randn(1, 2, 65, 32)
    q2, k2 = enc.rotate(q, k, pos)
    m = 0.1 * math.log(2.0) + 1
    torch.testing.assert_close(q2[..., 1:, :].norm(dim=-1), m * q[..., 1:, :].norm(dim=-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k2[..., 1:, :].norm(dim=-1), m * k[..., 1:, :].norm(dim=-1), rtol=1e-5, atol=1e-5)
