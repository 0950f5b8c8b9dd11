"""Record timm's N-D axial rotary embedding on a video grid into tests/data/parity/rope_axial_video.pt, which
tests/parity/test_parity_timm_video.py compares vispe's ``rope_axial`` in 3D (ndim=3) with.

``rope_axial`` follows timm's RoPE-ViT layout on images (2D, tested elsewhere); its 3D form extends it with one
frequency ladder per axis. The nearest reference is timm 1.0.31 itself (huggingface/pytorch-image-models v1.0.31,
``timm/layers/pos_embed_sincos.py``): ``build_rotary_pos_embed`` takes a feature shape of any rank, here (t, h, w),
and gives every axis the same bands, ``freq_bands(n, temperature=100, step=1)`` = 1/100^(k/n) (vispe's theta and
ladder); ``apply_rot_embed`` rotates the interleaved pairs. The pairs come axis by axis in (t, h, w) order; vispe's
come column, row, time, a permutation of the pairs that the test applies to q and k. timm gives each axis the same
number of pairs, so the head dim is 48 (8 pairs an axis, vispe's even split). Run (timm is vispe's dependency):

    python tools/parity/record_rope_axial_video.py

The file holds q and k (timm's pair order) and the logits of the rotated q and k, 2 heads, a 2 x 3 x 4 clip, float32.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import timm
import torch
from timm.layers import pos_embed_sincos as sincos

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'rope_axial_video.pt')
HEADS, HEAD_DIM, THETA, GRID = 2, 48, 100.0, (2, 3, 4)


def main() -> None:
    assert timm.__version__ == '1.0.31', f'record with timm 1.0.31, found {timm.__version__}'
    pairs = HEAD_DIM // 2 // len(GRID)
    bands = sincos.freq_bands(pairs, temperature=THETA, step=1)
    sin, cos = sincos.build_rotary_pos_embed(list(GRID), bands=bands, in_pixels=False)  # (N, HEAD_DIM) each
    generator = torch.Generator().manual_seed(0)
    n = sin.shape[0]
    q = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator)
    q_rot, k_rot = sincos.apply_rot_embed(q, sin, cos), sincos.apply_rot_embed(k, sin, cos)
    source = inspect.getsource(sincos.build_rotary_pos_embed) + inspect.getsource(sincos.apply_rot_embed)
    record = {
        'reference': 'huggingface/pytorch-image-models@v1.0.31:timm/layers/pos_embed_sincos.py:'
        'build_rotary_pos_embed, freq_bands, apply_rot_embed',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'grid': list(GRID),
        'q': q, 'k': k, 'logits': q_rot @ k_rot.transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
