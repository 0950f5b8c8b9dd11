"""Parity with DINOv3's own RoPE (facebookresearch/dinov3, ``dinov3/layers/rope_position_encoding.py``:
``RopePositionEmbedding``, with ``dinov3/layers/attention.py``'s ``SelfAttention.apply_rope``; recorder:
tools/parity/record_rope_dinov3.py): ``rope_dinov3`` at evaluation (each ``normalize``, and the min / max period
ladder) and in training with the reference's draws of shift, jitter and rescale, on a 3 x 5 grid behind 3 prefix
tokens (cls and two storage tokens), comparing the logits q . k of every token pair.

DINOv3 pairs channel j with j + d/2 (rotate-half) where vispe pairs (2j, 2j + 1): q and k go in through
``interleaved``, a permutation that leaves every q . k as it is. The reference computes in float64 at evaluation
(its ``dtype``; its configs use bfloat16), vispe in float32: tolerance 1e-5.

Strategy ``extend`` (normalise by the training grid, not the image's) is not DINOv3's: its reference only defines
it where it coincides with DINOv3's own coordinates, the tokens of the training grid, where it is compared below.
"""

from __future__ import annotations

import pytest
import torch
from recorded import interleaved, recorded

import vispe.encodings.dinov3 as dinov3
from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name
METHODS = ('rope_dinov3',)

#: vispe's option names for the reference's ``RopePositionEmbedding`` arguments
OPTION = {
    'normalize_coords': 'normalize', 'base': 'base', 'min_period': 'min_period', 'max_period': 'max_period',
    'shift_coords': 'shift', 'jitter_coords': 'jitter', 'rescale_coords': 'rescale',
}  # fmt: skip
AUGMENTATION = ('shift_coords', 'jitter_coords', 'rescale_coords')


def build(record: dict, settings: dict, **options):
    """vispe's rope_dinov3 with the reference case's settings (the augmentation off unless the case sets it: the
    reference's defaults), ``options`` on top."""
    spec = {'type': 'rope_dinov3', **{a: None for a in ('shift', 'jitter', 'rescale')}}
    spec.update({OPTION[name]: value for name, value in settings.items()}, **options)
    heads, head_dim = record['heads'], record['head_dim']
    return build_encoding(spec, dim=heads * head_dim, num_heads=heads, ndim=2, grid_size=tuple(record['grid']))


def logits(enc, record: dict, grid: str = 'grid', block: bool = True) -> torch.Tensor:
    """vispe's logits on the record's q and k, the 3 x 5 grid's tokens (``block``) or the 4 x 7 grid's."""
    q, k = record['q'], record['k']
    if block:
        q, k = q[:, :, record['block']], k[:, :, record['block']]
    pos = grid_positions(*record[grid], num_prefix=record['num_prefix'])
    q, k = enc.rotate(interleaved(q), interleaved(k), pos)
    return (q @ k.transpose(-2, -1)).double()


def drawn(case: dict) -> torch.Tensor:
    """The reference's draws in vispe's form (``coordinate_augmentation``): row 0 the (row, col) shift, row 1 the
    (row, col) factors, jitter times rescale."""
    draws = list(case['draws'])
    shifts, factors = torch.zeros(2), torch.ones(2)
    if case['settings'].get('shift_coords') is not None:
        shifts = draws.pop(0)
    if case['settings'].get('jitter_coords') is not None:
        factors = factors * draws.pop(0).exp()
    if case['settings'].get('rescale_coords') is not None:
        factors = factors * draws.pop(0).exp()
    assert not draws
    return torch.stack([shifts, factors])


@pytest.mark.parametrize('name', ['eval_separate', 'eval_min', 'eval_max', 'eval_periods'])
def test_eval_matches_rope_position_embedding(name) -> None:
    """At evaluation: the same logits for every pair of prefix and patch tokens, each coordinate normalisation
    (the grid is 3 x 5, so the three differ) and both period ladders."""
    record = recorded('rope_dinov3')
    case = record['cases'][name]
    enc = build(record, case['settings']).eval()
    torch.testing.assert_close(logits(enc, record), case['logits'], atol=1e-5, rtol=1e-5)


def test_eval_cases_tell_the_settings_apart() -> None:
    """Each evaluation case's logits differ from the others' by far more than the tolerance, so each comparison
    above checks its own setting."""
    cases = recorded('rope_dinov3')['cases']
    names = ['eval_separate', 'eval_min', 'eval_max', 'eval_periods']
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert (cases[a]['logits'] - cases[b]['logits']).abs().max() > 0.01, (a, b)


def test_eval_on_a_larger_grid_matches_and_extend_does_not() -> None:
    """On a 4 x 7 grid (training grid 3 x 5), strategy ``none`` is DINOv3's own normalisation by the image's grid:
    the reference's logits. ``extend`` keeps the training grid's spacing instead, so it differs there."""
    record = recorded('rope_dinov3')
    case = record['cases']['eval_large']
    enc = build(record, {}).eval()
    torch.testing.assert_close(logits(enc, record, 'large', block=False), case['logits'], atol=1e-5, rtol=1e-5)
    enc.strategy = 'extend'
    assert (logits(enc, record, 'large', block=False) - case['logits']).abs().max() > 0.1


def test_extend_gives_the_training_grid_its_reference_coordinates() -> None:
    """``extend`` on the 4 x 7 grid normalises by the training grid 3 x 5, so the prefix tokens and the grid's top-left
    3 x 5 block get DINOv3's own coordinates of the 3 x 5 grid: their logits are the reference's at 3 x 5 (the
    tokens beyond the block extend past (-1, 1), where the reference defines nothing)."""
    record = recorded('rope_dinov3')
    enc = build(record, {}).eval()
    enc.strategy = 'extend'
    pos = grid_positions(*record['large'], num_prefix=record['num_prefix'])
    q, k = enc.rotate(interleaved(record['q']), interleaved(record['k']), pos)
    block = record['block']
    ours = (q[:, :, block] @ k[:, :, block].transpose(-2, -1)).double()
    torch.testing.assert_close(ours, record['cases']['eval_separate']['logits'], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('name', ['train_all', 'train_rescale'])
def test_training_with_the_reference_draws(name, monkeypatch) -> None:
    """In training, with the draws the reference made (shift, jitter, rescale) handed to vispe in place of its own:
    the same logits. float32 on both sides."""
    record = recorded('rope_dinov3')
    case = record['cases'][name]
    draw = drawn(case)
    monkeypatch.setattr(dinov3, 'coordinate_augmentation', lambda *args: draw)
    enc = build(record, case['settings']).train()
    torch.testing.assert_close(logits(enc, record), case['logits'].double(), atol=1e-5, rtol=1e-5)
    assert (case['logits'] - record['cases']['eval_separate']['logits']).abs().max() > 0.1  # the draw counts


@pytest.mark.parametrize('name', ['train_all', 'train_rescale'])
def test_training_draws_what_the_reference_draws_from_the_same_seed(name) -> None:
    """vispe draws its augmentation from torch's global generator in DINOv3's order and dtype: under the
    reference's seed it draws the same numbers, so a seeded run gives the reference's logits."""
    record = recorded('rope_dinov3')
    case = record['cases'][name]
    enc = build(record, case['settings']).train()
    torch.manual_seed(case['seed'])
    torch.testing.assert_close(logits(enc, record), case['logits'].double(), atol=1e-5, rtol=1e-5)


def test_default_rescale_differs_from_the_reference_class_default() -> None:
    """vispe's default ``rescale=2`` is DINOv3's pretraining config; ``RopePositionEmbedding``'s own default is no
    augmentation. In training the two differ; ``rescale=None`` gives the reference default's logits (its eval ones,
    as it draws nothing); at evaluation the default changes nothing."""
    record = recorded('rope_dinov3')
    reference_default = record['cases']['eval_separate']['logits']
    heads, head_dim = record['heads'], record['head_dim']
    enc = build_encoding({'type': 'rope_dinov3'}, dim=heads * head_dim, num_heads=heads, ndim=2).train()
    assert enc.rescale == 2.0
    torch.manual_seed(record['cases']['train_rescale']['seed'])
    assert (logits(enc, record) - reference_default).abs().max() > 0.1
    enc.eval()
    torch.testing.assert_close(logits(enc, record), reference_default, atol=1e-5, rtol=1e-5)
    enc = build_encoding({'type': 'rope_dinov3', 'rescale': None}, dim=heads * head_dim, num_heads=heads).train()
    torch.testing.assert_close(logits(enc, record), reference_default, atol=1e-5, rtol=1e-5)


def test_shift_moves_only_the_prefix_logits() -> None:
    """What the reference's shift changes: patch-to-patch logits depend on coordinate differences, so with the
    jitter and rescale off a shift leaves them as at evaluation and changes those against the prefix tokens."""
    record = recorded('rope_dinov3')
    enc = build(record, {'shift_coords': 0.5}).train()
    prefix = record['num_prefix']
    torch.manual_seed(0)
    shifted = logits(enc, record)
    still = record['cases']['eval_separate']['logits']
    torch.testing.assert_close(shifted[..., prefix:, prefix:], still[..., prefix:, prefix:], atol=1e-5, rtol=1e-5)
    assert (shifted[..., :prefix, prefix:] - still[..., :prefix, prefix:]).abs().max() > 0.01
