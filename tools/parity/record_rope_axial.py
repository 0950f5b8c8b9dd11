"""Record RoPE-ViT's axial RoPE (Heo et al., ECCV 2024) into tests/data/parity/rope_axial.pt, which
tests/parity/test_parity_rope_vit.py compares vispe's ``rope_axial`` with.

The reference is the authors' code, naver-ai/rope-vit at commit ce85c2e56c5ff3aadc10e1a849872081f7b86293,
``models/vit_rope.py``: ``compute_axial_cis`` builds the complex table of a grid (end_x columns, end_y rows, the
x ladder's pairs before the y ladder's), ``apply_rotary_emb`` rotates q and k by it (pairs of interleaved channels),
and ``RoPEAttention.forward`` leaves the cls token (index 0) unrotated. Run from a local copy of that commit (its
module imports timm, which vispe already needs, and the repository's own ``deit`` folder):

    git --git-dir=<bare clone of naver-ai/rope-vit> archive ce85c2e5 | tar -x -C /tmp/ref/rope-vit
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/ref/rope-vit:. python tools/parity/record_rope_axial.py

The file holds q and k (1 cls token, then a 3 x 4 grid row-major), the settings, the reference's rotated q and k
and their logits. float32: the reference casts to float32 and builds its table in float32.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch

from models import vit_rope

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'rope_axial.pt')
COMMIT = 'ce85c2e56c5ff3aadc10e1a849872081f7b86293'
HEADS, HEAD_DIM, THETA = 2, 16, 100.0
GRID = (3, 4)  # (rows, columns): end_y = 3, end_x = 4, so the two axes cannot be swapped unnoticed


def main() -> None:
    h, w = GRID
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, 1 + h * w, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, 1 + h * w, HEAD_DIM, generator=generator)
    freqs_cis = vit_rope.compute_axial_cis(dim=HEAD_DIM, end_x=w, end_y=h, theta=THETA)
    q_rot, k_rot = q.clone(), k.clone()  # as RoPEAttention.forward: the cls token stays, the patches turn
    q_rot[:, :, 1:], k_rot[:, :, 1:] = vit_rope.apply_rotary_emb(q[:, :, 1:], k[:, :, 1:], freqs_cis=freqs_cis)
    functions = (vit_rope.compute_axial_cis, vit_rope.init_t_xy, vit_rope.apply_rotary_emb, vit_rope.RoPEAttention)
    source = ''.join(inspect.getsource(f) for f in functions)
    record = {
        'reference': f'naver-ai/rope-vit@{COMMIT}:models/vit_rope.py:compute_axial_cis,apply_rotary_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'grid': list(GRID), 'num_prefix': 1,
        'q': q, 'k': k, 'q_rot': q_rot, 'k_rot': k_rot, 'logits': q_rot @ k_rot.transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
