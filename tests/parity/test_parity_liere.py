"""Parity with LieRE's authors' code, StanfordMIMI/LieRE ``models/rope_vit.py`` (recorder:
tools/parity/record_liere.py): the logits R(x_m) q_m . R(x_n) k_n for every token pair, cls included, of
``LierePositionEncoder`` and ``FlexibleAttention.apply_transforms`` with per-head generators, with the reference's
raw generator tensors copied into vispe's ``liere`` (their strict upper triangles, heads major)."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions, video_positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('liere',)


def vispe_generators(raw: torch.Tensor, heads: int) -> torch.Tensor:
    """The reference's (ndim, 1, H J, b, b) -> vispe's (ndim, H, J, b (b - 1) / 2): the strict upper triangle of
    block h J + j, row-major (the reference reads nothing else: A = U - U^T)."""
    b = raw.shape[-1]
    rows, cols = torch.triu_indices(b, b, 1)
    return raw[:, 0, :, rows, cols].unflatten(1, (heads, -1))


def logits(record: dict, name: str) -> torch.Tensor:
    heads, head_dim = record['heads'], record['head_dim']
    train, grid = record[f'{name}/train_grid'], record[f'{name}/grid']
    enc = build_encoding(
        {'type': 'liere', 'block_size': record[f'{name}/block_size']}, dim=heads * head_dim, num_heads=heads,
        ndim=len(grid), grid_size=tuple(train),
    )  # fmt: skip
    with torch.no_grad():
        enc.generators.copy_(vispe_generators(record[f'{name}/generators'], heads))
    pos = grid_positions(*grid, num_prefix=1) if len(grid) == 2 else video_positions(*grid, num_prefix=1)
    n = 1 + pos.num_tokens
    q, k = enc.rotate(record['q'][:, :, :n], record['k'][:, :, :n], pos)
    return q @ k.transpose(-1, -2)


@pytest.mark.parametrize('name', ['2d_b8', '2d_b4', '2d_b2', '2d_b8_other_size', '3d_b8'])
def test_liere_logits_match_the_reference(name) -> None:
    """Every logit, cls rows and columns included, to float32 rounding: both sides exponentiate in float32 and the
    generators at the reference's U(0, 2 pi) init have norms near 100, so about 1e-5 of logits of size 10-30."""
    record = recorded('liere')
    ours, theirs = logits(record, name), record[f'{name}/logits']
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=2e-5)


def test_liere_recorded_logits_are_not_those_of_plain_attention() -> None:
    """The recorded rotations are far from the identity (so the comparison above can fail): every patch logit
    moves by O(1) from q . k."""
    record = recorded('liere')
    n = record['2d_b8/logits'].shape[-1]
    plain = record['q'][:, :, :n] @ record['k'][:, :, :n].transpose(-1, -2)
    assert (record['2d_b8/logits'][..., 1:, 1:] - plain[..., 1:, 1:]).abs().mean() > 1.0
