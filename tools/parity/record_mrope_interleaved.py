"""Record Qwen3-VL's interleaved M-RoPE into tests/data/parity/mrope_interleaved.pt, which
tests/parity/test_parity_qwen3_vl.py compares vispe's ``mrope`` (its default ``layout='interleaved'``) with.

The reference is Hugging Face transformers 4.57.1 (the tagged release v4.57.1),
``transformers/models/qwen3_vl/modeling_qwen3_vl.py``: ``Qwen3VLTextRotaryEmbedding`` builds cos and sin from the
three position ids (t, h, w) of each token, its ``apply_interleaved_mrope`` giving pairs 1, 4, 7, ... below
3 s_h to h and 2, 5, 8, ... below 3 s_w to w, the rest to t; ``apply_rotary_pos_emb`` rotates q and k (rotate-half).
timm's ``RotaryEmbeddingMRope`` (``timm.layers.pos_embed_sincos``) ports the same layout. Run from an installed copy
of that release (commands in tools/parity/record_mrope.py):

    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/tfenv python tools/parity/record_mrope_interleaved.py

Cases on one 2 x 3 x 4 clip: ``mrope_section`` (6, 5, 5), which fills the 16 pairs as Qwen3-VL's (24, 20, 20)
fills 64, and (4, 3, 3), whose strides stop at pair 8, time taking the 10 pairs left (s_t is nominal). vispe's
default (8, 12, 12) gives the first case's layout at 16 pairs (its strides stop at the last pair). These two at theta
10000, vispe's (and timm's) default; a third, ``qwen3_theta``, takes Qwen3-VL's own 5e6 with (6, 5, 5).
float32, as the reference.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch
import transformers
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'mrope_interleaved.pt')
HEADS, HEAD_DIM, THETA = 1, 32, 10000.0
CASES = {  # name: (mrope_section (pairs of t, h, w; s_t nominal in the interleave), theta)
    '6_5_5': ((6, 5, 5), THETA),
    '4_3_3': ((4, 3, 3), THETA),
    'qwen3_theta': ((6, 5, 5), Qwen3VLTextConfig().rope_theta),  # Qwen3-VL's base, 5e6 (vispe's default: timm's)
}
GRID = (2, 3, 4)  # (t, h, w) tokens, time-major as vispe.positions.video_positions


def main() -> None:
    assert transformers.__version__ == '4.57.1', f'record from transformers 4.57.1, found {transformers.__version__}'
    t, h, w = GRID
    ids = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing='ij'), -1)
    position_ids = ids.reshape(-1, 3).T[:, None, :]  # (3, batch 1, N): the t, h and w id of each token
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, t * h * w, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, t * h * w, HEAD_DIM, generator=generator)
    cases = {}
    for name, (section, theta) in CASES.items():
        scaling = {'rope_type': 'default', 'mrope_section': list(section), 'mrope_interleaved': True}
        config = Qwen3VLTextConfig(
            hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
            rope_theta=theta, rope_scaling=scaling,
        )  # fmt: skip
        cos, sin = qwen.Qwen3VLTextRotaryEmbedding(config)(q, position_ids)
        q_rot, k_rot = qwen.apply_rotary_pos_emb(q, k, cos, sin)
        logits = q_rot @ k_rot.transpose(-2, -1)
        cases[name] = {'mrope_section': list(section), 'theta': float(theta), 'logits': logits}
    source = inspect.getsource(qwen.Qwen3VLTextRotaryEmbedding) + inspect.getsource(qwen.apply_rotary_pos_emb)
    record = {
        'reference': 'huggingface/transformers@v4.57.1:src/transformers/models/qwen3_vl/modeling_qwen3_vl.py:'
        'Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope,apply_rotary_pos_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'grid': list(GRID), 'q': q, 'k': k, 'cases': cases,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
