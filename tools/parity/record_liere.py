"""Record LieRE (Ostmeier et al., ICML 2025) from its authors' code into tests/data/parity/liere.pt, which
tests/parity/test_parity_liere.py compares vispe's ``liere`` with.

The reference is StanfordMIMI/LieRE at commit b27b41ba0d27331ec0774de852939c6d407889aa, ``models/rope_vit.py``:
``LierePositionEncoder.forward`` (positions linspace(0, n / g, n) per axis from the image size and the training
size, the generators' strict upper triangles U, A = U - U^T, R = matrix_exp(sum_a x_a A_a) in float32, the identity
prepended for the cls token) and ``FlexibleAttention.apply_transforms`` (the block rotations applied to q and k), with
per-head generators (``rotary_embedding_per_head``), as its ImageNet configuration. It runs as it is, from a local
copy of the repository; its modules import ``ipdb`` (a debugger, never called here), for which a stand-in module is
put into ``sys.modules``, and ``einops`` (not part of vispe's requirements, and not needed by the test):

    git clone https://github.com/StanfordMIMI/LieRE /tmp/ref/LieRE   # then check out the commit above
    pip install --target /tmp/ref-liere --no-deps einops==0.8.0
    PYTHONPATH=/tmp/ref-liere:/tmp/ref/LieRE python tools/parity/record_liere.py

Cases (2 heads of 64 channels, the head size ``FlexibleAttention`` asserts; float32, as the reference's exponential):
2D at the training grid 3 x 4 with block sizes 8 (vispe's default), 4 and 2; 2D at a 2 x 5 grid (n / g = 2/3 and
5/4: positions beyond [0, 1] on one axis, shrunk on the other) with b = 8; and a 2 x 2 x 3 volume with b = 8. The
generators are the reference's own initialisation, U(0, 2 pi) per entry, from fixed seeds. The file holds q, k (for
the largest token count; each case reads its first tokens), the reference's raw generator tensors
(ndim, 1, H J, b, b) and its logits q_rot . k_rot for every token pair.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import types

import torch

sys.modules.setdefault('ipdb', types.ModuleType('ipdb'))  # imported by the reference's modules, never used here
from models import rope_vit as ref  # noqa: E402  (the authors' module, models/rope_vit.py)

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'liere.pt')
COMMIT = 'b27b41ba0d27331ec0774de852939c6d407889aa'
HEADS, HEAD_DIM, PATCH = 2, 64, 4
#: name -> (training grid, evaluated grid, block size)
CASES = {
    '2d_b8': ((3, 4), (3, 4), 8),
    '2d_b4': ((3, 4), (3, 4), 4),
    '2d_b2': ((3, 4), (3, 4), 2),
    '2d_b8_other_size': ((3, 4), (2, 5), 8),
    '3d_b8': ((2, 2, 3), (2, 2, 3), 8),
}


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    tokens = 1 + max(torch.Size(grid).numel() for _, grid, _ in CASES.values())
    q, k = (torch.randn(1, HEADS, tokens, HEAD_DIM, generator=generator) for _ in range(2))
    source = inspect.getsource(ref.LierePositionEncoder) + inspect.getsource(ref.FlexibleAttention)
    record = {
        'reference': f'StanfordMIMI/LieRE@{COMMIT}:models/rope_vit.py:LierePositionEncoder.forward,'
        'FlexibleAttention.apply_transforms',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'q': q, 'k': k, 'cases': list(CASES),
    }  # fmt: skip
    attention = ref.FlexibleAttention(HEADS * HEAD_DIM, HEADS, HEAD_DIM, dropout=0.0, rotary_embedding_per_head=True)
    for seed, (name, (train, grid, block)) in enumerate(CASES.items()):
        torch.manual_seed(seed)  # the reference draws its generators from the global generator
        encoder = ref.LierePositionEncoder(
            image_size=[n * PATCH for n in train], patch_size=PATCH, dim=HEADS * HEAD_DIM, phase_type='learned',
            position_sequencing_type='sequential', heads=HEADS, input_dimensionality=len(train),
            generator_dim=block, depth=1, rotary_embedding_per_layer=False, rotary_embedding_per_head=True,
        )  # fmt: skip
        n = 1 + torch.Size(grid).numel()
        with torch.no_grad():
            transforms = encoder(torch.tensor([[g * PATCH for g in grid]]), dtype=torch.float32)
            q_rot = attention.apply_transforms(q[:, :, :n], transforms)
            k_rot = attention.apply_transforms(k[:, :, :n], transforms)
        record[f'{name}/train_grid'] = list(train)
        record[f'{name}/grid'] = list(grid)
        record[f'{name}/block_size'] = block
        record[f'{name}/generators'] = encoder.generator_raw_params.detach().clone()  # (ndim, 1, H J, b, b)
        record[f'{name}/logits'] = q_rot @ k_rot.transpose(-1, -2)
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
