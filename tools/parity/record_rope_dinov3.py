"""Record DINOv3's RoPE (Simeoni et al., "DINOv3", 2025) into tests/data/parity/rope_dinov3.pt, which
tests/parity/test_parity_dinov3.py compares vispe's ``rope_dinov3`` with.

The reference is the authors' code, facebookresearch/dinov3 at commit 6876159a11b4df116f30f667f8c9888617df0751:
``dinov3/layers/rope_position_encoding.py``'s ``RopePositionEmbedding`` builds (sin, cos) for an H x W grid
(coordinates normalised into (-1, 1), augmented in training by shift, jitter and rescale drawn from torch's global
generator), and ``dinov3/layers/attention.py``'s ``SelfAttention.apply_rope`` rotates q and k with it (rotate-half,
the prefix tokens, cls and storage tokens, unrotated). Run from a local copy of that commit:

    git --git-dir=<bare clone of facebookresearch/dinov3> archive 6876159a dinov3 | tar -x -C /tmp/ref/dinov3
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/ref/dinov3:. python tools/parity/record_rope_dinov3.py

Recorded: q and k (3 prefix tokens, then a 4 x 7 grid row-major; the 3 x 5 cases take the prefix and the grid's
top-left 3 x 5 block, ``block``), and per case the reference's settings and logits q . k for every token pair:

- ``eval_*``: at evaluation on the 3 x 5 grid, normalize 'separate' / 'min' / 'max' with base 100, and 'separate'
  with min_period and max_period; ``eval_large``: 'separate' on the whole 4 x 7 grid. float64 (the reference's
  ``dtype``).
- ``train_*``: in training mode on the 3 x 5 grid, under a fixed global seed, with every draw the reference made
  (``Tensor.uniform_``'s results, in order: shift (2), log jitter (2), log rescale (1)) caught by a
  ``TorchFunctionMode`` and recorded. float32, so that vispe (float32) draws the same numbers from the same seed.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch
from dinov3.layers import attention, rope_position_encoding
from torch.overrides import TorchFunctionMode

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'rope_dinov3.pt')
COMMIT = '6876159a11b4df116f30f667f8c9888617df0751'
HEADS, HEAD_DIM, PREFIX = 1, 16, 3
GRID, LARGE = (3, 5), (4, 7)  # (H, W): the cases' grid (not square: 'min', 'max', 'separate' differ), a larger one
EVAL = {
    'eval_separate': {'normalize_coords': 'separate'},
    'eval_min': {'normalize_coords': 'min'},
    'eval_max': {'normalize_coords': 'max'},
    'eval_periods': {'normalize_coords': 'separate', 'base': None, 'min_period': 0.5, 'max_period': 40.0},
}
TRAIN = {  # (settings, global seed)
    'train_all': ({'shift_coords': 0.5, 'jitter_coords': 1.5, 'rescale_coords': 2.0}, 11),
    'train_rescale': ({'rescale_coords': 2.0}, 12),  # DINOv3's pretraining configs
}


class Draws(TorchFunctionMode):
    """Keeps a copy of what every ``Tensor.uniform_`` drew, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.uniform_:
            self.drawn.append(out.detach().clone())
        return out


def logits(q: torch.Tensor, k: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    attn = attention.SelfAttention(HEADS * HEAD_DIM, num_heads=HEADS)
    q_rot, k_rot = attn.apply_rope(q.to(rope[0].dtype), k.to(rope[0].dtype), rope)
    return q_rot @ k_rot.transpose(-2, -1)


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, PREFIX + LARGE[0] * LARGE[1], HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, PREFIX + LARGE[0] * LARGE[1], HEAD_DIM, generator=generator)
    rows, cols = torch.meshgrid(torch.arange(GRID[0]), torch.arange(GRID[1]), indexing='ij')
    block = torch.cat([torch.arange(PREFIX), PREFIX + (rows * LARGE[1] + cols).flatten()])
    record: dict = {
        'heads': HEADS, 'head_dim': HEAD_DIM, 'num_prefix': PREFIX, 'grid': list(GRID), 'large': list(LARGE),
        'q': q, 'k': k, 'block': block, 'cases': {},
    }  # fmt: skip
    for name, settings in EVAL.items():
        rope = rope_position_encoding.RopePositionEmbedding(
            HEADS * HEAD_DIM, num_heads=HEADS, dtype=torch.float64, **settings
        ).eval()
        sin_cos = rope(H=GRID[0], W=GRID[1])
        record['cases'][name] = {'settings': settings, 'logits': logits(q[:, :, block], k[:, :, block], sin_cos)}
    rope = rope_position_encoding.RopePositionEmbedding(HEADS * HEAD_DIM, num_heads=HEADS, dtype=torch.float64)
    record['cases']['eval_large'] = {'settings': {}, 'logits': logits(q, k, rope.eval()(H=LARGE[0], W=LARGE[1]))}
    for name, (settings, seed) in TRAIN.items():
        rope = rope_position_encoding.RopePositionEmbedding(
            HEADS * HEAD_DIM, num_heads=HEADS, dtype=torch.float32, **settings
        ).train()
        torch.manual_seed(seed)
        with Draws() as draws:
            sin_cos = rope(H=GRID[0], W=GRID[1])
        record['cases'][name] = {
            'settings': settings, 'seed': seed, 'draws': draws.drawn,
            'logits': logits(q[:, :, block], k[:, :, block], sin_cos),
        }  # fmt: skip
    source = inspect.getsource(rope_position_encoding) + inspect.getsource(attention.SelfAttention.apply_rope)
    source += inspect.getsource(attention.rope_apply) + inspect.getsource(attention.rope_rotate_half)
    record['reference'] = (
        f'facebookresearch/dinov3@{COMMIT}:dinov3/layers/rope_position_encoding.py:RopePositionEmbedding'
        ' (rotation: dinov3/layers/attention.py:SelfAttention.apply_rope)'
    )
    record['source_sha256'] = hashlib.sha256(source.encode()).hexdigest()
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
