"""Parity with Hugging Face transformers v4.57.1 (recorders: tools/parity/record_mrope.py, record_yarn.py):
Qwen2-VL's M-RoPE (``mrope`` with ``layout='sections'``), YaRN's attention temperature and frequency tables, and
position interpolation's (transformers' 'linear' scaling)."""

from __future__ import annotations

import math

import pytest
import torch
from recorded import interleaved, recorded

from vispe import build_encoding
from vispe.encodings.rope import RoPEAxial
from vispe.encodings.rotary_scaling import yarn_mscale
from vispe.positions import grid_positions, video_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('mrope', 'strategy:yarn', 'strategy:interpolate')


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


def axial_table(table: dict, strategy: str) -> torch.Tensor:
    """rope_axial's frequencies on one axis, with the table's pairs per axis, theta, training extent and scale."""
    enc = RoPEAxial(4 * table['pairs'], 1, theta=table['theta'], grid_size=(table['train'], table['train']))
    enc.strategy = strategy
    return enc.axis_frequencies((table['factor'], table['factor']))[0].double()


def ramp_turns_over(table: dict) -> bool:
    """Whether transformers' ramp has high < low: ceil of the pair index at 1 rotation is below 0, as on a training
    extent shorter than 2 pi theta^(-1 / pairs) positions."""
    pairs, theta, train = table['pairs'], table['theta'], table['train']
    return math.ceil(pairs * math.log(train / (2 * math.pi)) / math.log(theta)) < 0


TABLES = recorded('yarn_temperature')['tables']


def table_id(table: dict) -> str:
    return f'{table["pairs"]}pairs-theta{table["theta"]:g}-train{table["train"]}-x{table["factor"]}'


@pytest.mark.parametrize('table', TABLES, ids=table_id)
def test_interpolate_is_transformers_linear_scaling(table: dict) -> None:
    torch.testing.assert_close(axial_table(table, 'interpolate'), table['linear'], rtol=1e-6, atol=0)


@pytest.mark.parametrize('table', [t for t in TABLES if not ramp_turns_over(t)], ids=table_id)
def test_yarn_frequencies_match_transformers(table: dict) -> None:
    """From an LLM's training extent (256 positions, pairs at 41 down to 0.7 rotations) to a ViT's (14 or 4), where
    the ramp's ends are clamped to the ladder's: the fastest pair is kept, the ramp is linear in the pair index."""
    torch.testing.assert_close(axial_table(table, 'yarn'), table['yarn'], rtol=1e-6, atol=0)


@pytest.mark.parametrize('table', [t for t in TABLES if ramp_turns_over(t)], ids=table_id)
def test_yarn_where_transformers_ramp_turns_over(table: dict) -> None:
    """A 4-position training extent with 16 pairs: every pair turns under one time, and transformers' ramp
    (low = 0, high = -1) divides by a negative width and keeps every pair; vispe clamps both ends into the ladder,
    so the ramp is a step at pair 0: the fastest pair kept, as where the ends meet, the others interpolated, as
    the paper's ramp does under one rotation (a stated departure)."""
    ladder = RoPEAxial(4 * table['pairs'], 1, theta=table['theta']).ladder(0).double()
    torch.testing.assert_close(table['yarn'], ladder, rtol=1e-6, atol=0)  # the reference: nothing scaled
    ours = axial_table(table, 'yarn')
    assert ours[0] == ladder[0]
    torch.testing.assert_close(ours[1:], ladder[1:] / table['factor'], rtol=1e-6, atol=0)
