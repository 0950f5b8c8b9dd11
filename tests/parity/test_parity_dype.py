"""Parity with DyPE's authors' code (guyyariv/DyPE at 436fe61, ``flux/transformer_flux.py``; recorder:
tools/parity/record_dype.py): the frequencies of ``dype_yarn`` (their two-ramp vision YaRN under the timestep
schedule), ``dype_ntk`` and plain ``ntk`` (their NTK-aware base) per axis, and the YaRN temperature, on FLUX's own
setting (64 training patches, 28 pairs an axis, theta 10000) and on ViT-sized ones (8 or 16 patches, 8 pairs,
theta 100), at t = 1, 0.5, 0.2, 0.05 and 0.001."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe.encodings.rope import RoPEAxial

METHODS = ('strategy:dype_yarn', 'strategy:dype_ntk', 'strategy:ntk')
STRATEGY = {('yarn', True): 'dype_yarn', ('ntk', True): 'dype_ntk', ('ntk', False): 'ntk'}
CASES = recorded('dype')['cases']


def case_id(case: dict) -> str:
    return f'{STRATEGY[case["method"], case["dype"]]}-{case["train"]}to{case["grid"]}-t{case["time"]}'


def ours(case: dict) -> tuple[list[torch.Tensor], float]:
    """vispe's per-axis (rows, columns) frequencies and q/k factor in the case's setting: rope_axial with the
    reference's pairs per axis, theta and training grid."""
    enc = RoPEAxial(2 * case['dim'], 1, theta=case['theta'], grid_size=(case['train'], case['train']))
    enc.strategy = STRATEGY[case['method'], case['dype']]
    scales = tuple(max(1.0, g / case['train']) for g in case['grid'])
    kappa = torch.tensor(case['time'] ** 2) if case['dype'] else None
    return enc.axis_frequencies(scales, kappa), enc.mscale(scales)


def turned_over(case: dict) -> bool:
    """Whether the reference's second ramp (back to the trained frequencies) has high < low: its thresholds (times
    kappa) are below every pair's rotations. (Where only the first has, its pairs are all past the second ramp's
    start in these cases, so the tables agree.)"""
    return bool(case['ramp_ends']) and case['ramp_ends'][1][0] > case['ramp_ends'][1][1]


@pytest.mark.parametrize('case', [c for c in CASES if not turned_over(c)], ids=case_id)
def test_frequencies_match_the_authors_tables(case: dict) -> None:
    freqs, _ = ours(case)
    for mine, theirs in zip(freqs, case['freqs']):
        torch.testing.assert_close(mine.double(), theirs, rtol=2e-6, atol=0)


def test_dype_yarn_is_two_ramps_not_yarn() -> None:
    """At t = 1 on FLUX's setting the table is the vision YaRN's, far from transformers' one-ramp YaRN."""
    case = next(c for c in CASES if c['method'] == 'yarn' and c['time'] == 1.0 and c['train'] == 64)
    enc = RoPEAxial(2 * case['dim'], 1, theta=case['theta'], grid_size=(64, 64))
    enc.strategy = 'yarn'
    yarn = enc.axis_frequencies((1.5, 2.0))
    assert max(float(((y.double() - t) / t).abs().max()) for y, t in zip(yarn, case['freqs'])) > 0.1


@pytest.mark.parametrize('case', [c for c in CASES if c['method'] == 'yarn'], ids=case_id)
def test_temperature_matches_on_square_grids(case: dict) -> None:
    """The reference scales each axis' cos and sin by 0.1 ln s_a + 1 at every t; vispe scales q and k by it at the
    geometric mean of the axis scales: the same on a square grid (a departure on others: one factor for q and k)."""
    _, factor = ours(case)
    if case['grid'][0] == case['grid'][1]:
        assert factor == pytest.approx(case['temperature'][0], rel=1e-6)
    else:
        assert min(case['temperature']) < factor < max(case['temperature'])


@pytest.mark.parametrize('case', [c for c in CASES if turned_over(c)], ids=case_id)
def test_near_t_0_the_trained_frequencies_where_the_reference_ramp_turns_over(case: dict) -> None:
    """At t = 0.001 every threshold is below the slowest pair's rotations: the paper's limit (kappa -> 0) is the
    trained frequencies, which vispe gives; the reference's clamped ramp has a negative width there and interpolates
    every pair instead (a stated departure)."""
    freqs, _ = ours(case)
    trained = RoPEAxial(2 * case['dim'], 1, theta=case['theta']).axis_frequencies((1.0, 1.0))
    for mine, base, theirs, grid in zip(freqs, trained, case['freqs'], case['grid']):
        torch.testing.assert_close(mine, base)
        scale = max(1.0, grid / case['train'])
        torch.testing.assert_close(theirs, base.double() / scale, rtol=2e-6, atol=0)  # the reference: PI
