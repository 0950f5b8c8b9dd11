"""Parity with the RoPE-ViT authors' code (Heo et al., "Rotary Position Embedding for Vision Transformer", ECCV
2024; naver-ai/rope-vit, ``models/vit_rope.py``; recorders: tools/parity/record_rope_axial.py, record_rope_mixed.py):
``rope_axial`` and ``rope_mixed`` at the training grid under strategy ``none``, a cls token in front as in the
authors' ``RoPEAttention``. timm ports both (``timm.layers.pos_embed_sincos``: ``RotaryEmbeddingCat`` and
``RotaryEmbeddingMixed`` with ``init_random_2d_freqs``, used by ``timm.models.eva``'s ``vit_*_rope_*.naver_in1k``).

Both references pair interleaved channels (2j, 2j + 1), as vispe does, so q and k go in unpermuted."""

from __future__ import annotations

import dataclasses

import torch
from recorded import recorded

from vispe import build_encoding
from vispe.positions import grid_positions

#: what this file holds parity for: encodings by name
METHODS = ('rope_axial', 'rope_mixed')


def logits(enc, record: dict) -> torch.Tensor:
    q, k = enc.rotate(record['q'], record['k'], grid_positions(*record['grid'], num_prefix=record['num_prefix']))
    return q @ k.transpose(-2, -1)


def build(name: str, record: dict, **options):
    heads, head_dim = record['heads'], record['head_dim']
    spec = {'type': name, 'theta': record['theta'], **options}
    return build_encoding(spec, dim=heads * head_dim, num_heads=heads, ndim=2, grid_size=tuple(record['grid']))


def test_rope_axial_matches_compute_axial_cis() -> None:
    """``compute_axial_cis`` + ``apply_rotary_emb``: the same logits for every pair of the cls token and the 3 x 4
    grid's patches (columns on the first d/4 pairs, rows on the last). float32 on both sides."""
    record = recorded('rope_axial')
    enc = build('rope_axial', record)
    torch.testing.assert_close(logits(enc, record), record['logits'], atol=1e-5, rtol=1e-5)
    q, _ = enc.rotate(record['q'], record['k'], grid_positions(*record['grid'], num_prefix=1))
    torch.testing.assert_close(q, record['q_rot'], atol=1e-6, rtol=1e-5)  # the rotated q itself, channel for channel


def test_rope_axial_tells_rows_from_columns() -> None:
    """The grid is 3 x 4, so reading it transposed (rows on the first pairs) changes the logits: the comparison
    above would catch an axis swap."""
    record = recorded('rope_axial')
    enc = build('rope_axial', record)
    h, w = record['grid']
    pos = grid_positions(h, w, num_prefix=1)
    swapped = dataclasses.replace(pos, coords=pos.coords.flip(-1), key=None)  # (col, row), not cached as the grid
    q, k = enc.rotate(record['q'], record['k'], swapped)
    assert ((q @ k.transpose(-2, -1)) - record['logits']).abs().max() > 0.1


def test_rope_mixed_matches_compute_mixed_cis_with_copied_frequencies() -> None:
    """``compute_mixed_cis`` + ``apply_rotary_emb`` with learned (f_x, f_y) per head, copied into vispe's ``freqs``
    (the same (2, heads, d/2) layout: f_x multiplies the column, f_y the row): the same logits for every token pair,
    cls token included. float32 on both sides."""
    record = recorded('rope_mixed')
    enc = build('rope_mixed', record)
    with torch.no_grad():
        enc.freqs.copy_(record['freqs'])
    torch.testing.assert_close(logits(enc, record), record['logits'], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        enc.freqs.copy_(record['freqs'].flip(0))  # f_x and f_y exchanged: other logits, so the test tells them apart
    assert (logits(enc, record) - record['logits']).abs().max() > 0.1


def test_rope_mixed_init_draws_the_reference_frequencies() -> None:
    """vispe's init (timm's vectorised ``init_random_2d_freqs``) gives, under the same global seed, exactly the
    frequencies the authors' ``init_random_2d_freqs`` drew: a seed reproduces the reference's model."""
    record = recorded('rope_mixed')
    torch.manual_seed(record['init_seed'])
    enc = build('rope_mixed', record)
    torch.testing.assert_close(enc.freqs.detach(), record['init_freqs'], atol=0, rtol=0)
