"""Record VRoPE (Liu et al., EMNLP 2025) into tests/data/parity/vrope.pt, which tests/parity/test_parity_vrope.py
compares vispe's ``vrope`` with.

The reference is the authors' repository johncaged/VRoPE at commit 6a7adbc819c4520895b897ca3c3187bee56155b7,
``vrope.py``: ``VRoPE.generate_nd_positions`` gives each token of a (t, h, w) clip one position id per channel
pair, (seq_len, d/2). The repository stops there: it has no rotation of its own, the ids go to the language model's
RoPE, pair i turned by id_i * theta^(-2i/d). That rotation is taken from transformers 4.45.2 (Qwen2's
``apply_rotary_pos_emb``, rotate-half; the release VideoRoPE's code also builds on), with cos and sin of
``id * inv_freq`` per pair, as Qwen2's rotary embedding forms them from one id. Run:

    git --git-dir=<mirror of johncaged/VRoPE> archive HEAD | tar -x -C /tmp/ref/VRoPE
    pip install --target /tmp/ref-vrope --no-deps transformers==4.45.2 tokenizers==0.20.3 regex \
        huggingface-hub==0.26.5
    PYTHONPATH=/tmp/ref-vrope python tools/parity/record_vrope.py /tmp/ref/VRoPE

The clip is 2 x 3 x 4 (t, h, w) video tokens alone (``current_index`` 0), 2 heads of 32 channels, theta 10000 (the
repository leaves theta to the language model). The file holds the ids, q and k (rotate-half order) and the logits
of the rotated q and k, in float32.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys

import torch
import transformers
from transformers.models.qwen2 import modeling_qwen2

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'vrope.pt')
COMMIT = '6a7adbc819c4520895b897ca3c3187bee56155b7'
HEADS, HEAD_DIM, THETA = 2, 32, 10000.0
GRID = (2, 3, 4)


def main(root: str) -> None:
    assert transformers.__version__ == '4.45.2', f'record with transformers 4.45.2, found {transformers.__version__}'
    sys.path.insert(0, root)
    import vrope

    ids = vrope.VRoPE(half_head_dim=HEAD_DIM // 2, half_time_dim=0).generate_nd_positions(GRID)  # (N, d/2) long
    inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM)
    freqs = ids.float() * inv_freq  # (N, d/2): pair i turns by its own id
    emb = torch.cat([freqs, freqs], dim=-1)[None]  # (1, N, d): rotate-half, pair i = channels i and i + d/2
    generator = torch.Generator().manual_seed(0)
    n = ids.shape[0]
    q = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator)
    q_rot, k_rot = modeling_qwen2.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    source = inspect.getsource(vrope.VRoPE.generate_nd_positions) + inspect.getsource(
        modeling_qwen2.apply_rotary_pos_emb
    )
    record = {
        'reference': f'johncaged/VRoPE@{COMMIT}:vrope.py:VRoPE.generate_nd_positions, with transformers 4.45.2 '
        'models/qwen2/modeling_qwen2.py:apply_rotary_pos_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'grid': list(GRID), 'position_ids': ids,
        'q': q, 'k': k, 'logits': q_rot @ k_rot.transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '/tmp/ref/VRoPE')
