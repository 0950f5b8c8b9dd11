"""Record RoPE-ViT's mixed RoPE with learned frequencies (Heo et al., ECCV 2024) into
tests/data/parity/rope_mixed.pt, which tests/parity/test_parity_rope_vit.py compares vispe's ``rope_mixed`` with.

The reference is the authors' code, naver-ai/rope-vit at commit ce85c2e56c5ff3aadc10e1a849872081f7b86293,
``models/vit_rope.py``: ``init_random_2d_freqs`` draws a head's frequencies (2, heads, d/2) (f_x, f_y),
``init_t_xy`` gives each token its column and row, ``compute_mixed_cis`` the complex table of angles
f_x x + f_y y per layer and head, ``apply_rotary_emb`` rotates q and k (interleaved channel pairs), and
``RoPEAttention.forward`` leaves the cls token unrotated. The learned frequencies are the reference's init under a
fixed seed, moved by a random step as training would move them, and recorded: the test copies them into vispe.
The init itself is recorded too, with its seed, to compare vispe's init with. Run from a local copy of that commit:

    git --git-dir=<bare clone of naver-ai/rope-vit> archive ce85c2e5 | tar -x -C /tmp/ref/rope-vit
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/ref/rope-vit:. python tools/parity/record_rope_mixed.py

float32, as the reference computes.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import warnings

import torch

from models import vit_rope

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'rope_mixed.pt')
COMMIT = 'ce85c2e56c5ff3aadc10e1a849872081f7b86293'
HEADS, HEAD_DIM, THETA, INIT_SEED = 2, 16, 10.0, 3
GRID = (3, 4)  # (rows, columns)


def main() -> None:
    h, w = GRID
    torch.manual_seed(INIT_SEED)  # the reference draws its init from the global generator
    init = vit_rope.init_random_2d_freqs(dim=HEAD_DIM, num_heads=HEADS, theta=THETA)  # (2, heads, d/2)
    generator = torch.Generator().manual_seed(0)
    freqs = init + 0.1 * torch.randn(init.shape, generator=generator)  # "learned": off the init's structure
    q = torch.randn(1, HEADS, 1 + h * w, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, 1 + h * w, HEAD_DIM, generator=generator)
    t_x, t_y = vit_rope.init_t_xy(end_x=w, end_y=h)
    with warnings.catch_warnings():  # torch.cuda.amp.autocast's deprecation, on the CPU
        warnings.simplefilter('ignore', FutureWarning)
        # one layer of rope_vit_models: its parameter is (2, depth, heads * d/2)
        freqs_cis = vit_rope.compute_mixed_cis(freqs.reshape(2, 1, -1), t_x, t_y, num_heads=HEADS)[0]
    q_rot, k_rot = q.clone(), k.clone()  # as RoPEAttention.forward: the cls token stays, the patches turn
    q_rot[:, :, 1:], k_rot[:, :, 1:] = vit_rope.apply_rotary_emb(q[:, :, 1:], k[:, :, 1:], freqs_cis=freqs_cis)
    functions = (
        vit_rope.init_random_2d_freqs, vit_rope.compute_mixed_cis, vit_rope.init_t_xy, vit_rope.apply_rotary_emb,
        vit_rope.RoPEAttention,
    )  # fmt: skip
    source = ''.join(inspect.getsource(f) for f in functions)
    record = {
        'reference': f'naver-ai/rope-vit@{COMMIT}:models/vit_rope.py:'
        'init_random_2d_freqs,compute_mixed_cis,apply_rotary_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'grid': list(GRID), 'num_prefix': 1,
        'init_seed': INIT_SEED, 'init_freqs': init, 'freqs': freqs,
        'q': q, 'k': k, 'q_rot': q_rot, 'k_rot': k_rot, 'logits': q_rot @ k_rot.transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
