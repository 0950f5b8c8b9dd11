"""Record Qwen2-VL's M-RoPE (its ``sections`` layout) into tests/data/parity/mrope_sections.pt, which
tests/test_parity.py compares vispe's ``mrope`` with (``layout='sections'``).

The reference is Hugging Face transformers 4.57.1 (the tagged release v4.57.1),
``transformers/models/qwen2_vl/modeling_qwen2_vl.py``: ``Qwen2VLRotaryEmbedding`` builds cos and sin from the three
position ids (t, h, w) of each token, ``apply_multimodal_rotary_pos_emb`` rotates q and k with them, the channels
cut into sections of ``mrope_section`` pairs. It is run as it is, from an installed copy of that release (not part
of vispe's requirements, and not needed by the test):

    pip install --target /tmp/tfenv --no-deps transformers==4.57.1
    pip install --target /tmp/tfenv tokenizers huggingface-hub safetensors regex
    PYTHONPATH=/tmp/tfenv python tools/parity/record_mrope.py

The file holds the inputs (q, k in the reference's channel order, rotate-half), the settings, and the reference's
rotated q and k and their logits, in float32 (the reference computes cos and sin in float32).
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch
import transformers
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'mrope_sections.pt')
HEADS, HEAD_DIM, THETA = 2, 32, 10000.0
SECTION = (4, 6, 6)  # pairs of t, h, w: 16 = HEAD_DIM / 2
GRID = (2, 3, 4)  # (t, h, w) tokens, time-major as vispe.positions.video_positions


def main() -> None:
    assert transformers.__version__ == '4.57.1', f'record from transformers 4.57.1, found {transformers.__version__}'
    t, h, w = GRID
    ids = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing='ij'), -1)
    position_ids = ids.reshape(-1, 3).T[:, None, :]  # (3, batch 1, N): the t, h and w id of each token
    config = Qwen2VLTextConfig(
        hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, rope_theta=THETA,
        rope_scaling={'type': 'mrope', 'mrope_section': list(SECTION)},
    )  # fmt: skip
    rotary = qwen.Qwen2VLRotaryEmbedding(config)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, t * h * w, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, t * h * w, HEAD_DIM, generator=generator)
    cos, sin = rotary(q, position_ids)
    q_rot, k_rot = qwen.apply_multimodal_rotary_pos_emb(q, k, cos, sin, list(SECTION))
    source = inspect.getsource(qwen.apply_multimodal_rotary_pos_emb) + inspect.getsource(qwen.Qwen2VLRotaryEmbedding)
    record = {
        'reference': 'huggingface/transformers v4.57.1, models/qwen2_vl/modeling_qwen2_vl.py: '
        'Qwen2VLRotaryEmbedding, apply_multimodal_rotary_pos_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'mrope_section': list(SECTION), 'grid': list(GRID),
        'q': q, 'k': k, 'q_rot': q_rot, 'k_rot': k_rot, 'logits': q_rot @ k_rot.transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
