"""Record VideoRoPE (Wei et al., ICML 2025) into tests/data/parity/videorope.pt, which
tests/parity/test_parity_videorope.py compares vispe's ``videorope`` with.

The reference is the authors' repository Wiselnn570/VideoRoPE at commit 7712ca3f52b795284e0453badc6cf1642c1368c4,
``videorope-transformer/modeling_videorope.py`` (their copy of transformers 4.45.2's Qwen2-VL modelling file):

- ``Qwen2VLForConditionalGeneration.get_t_scale_rope_index``: the (t, h, w) position ids of every token, with the
  diagonal layout and the temporal spacing ``scale_factor`` (2.0 where ``which_rope == 'videorope'``);
- ``Qwen2VLRotaryEmbedding``: cos and sin of the three ids on every frequency;
- ``apply_m_modify_multimodal_rotary_pos_emb``: the rotation, each channel pair reading its axis (h, w alternating
  on the high frequencies, t on the lowest).

``get_t_scale_rope_index`` is a method that reads only ``self.config``: it is called with a stand-in object that
holds Qwen2-VL's token ids and ``spatial_merge_size``. The module is loaded as
``transformers.models.qwen2_vl.modeling_videorope`` so that its relative imports resolve to transformers 4.45.2
(the release the authors built on). Run:

    git --git-dir=<mirror of Wiselnn570/VideoRoPE> archive HEAD videorope-transformer | tar -x -C /tmp/ref/VideoRoPE
    pip install --target /tmp/ref-videorope --no-deps transformers==4.45.2 tokenizers==0.20.3 regex \
        huggingface-hub==0.26.5
    PYTHONPATH=/tmp/ref-videorope python tools/parity/record_videorope.py /tmp/ref/VideoRoPE

The clip: one vision-start token, then a 2 x 3 x 4 (t, h, w) grid of video tokens (the reference merges 2 x 2
patches, so its ``video_grid_thw`` is (2, 6, 8)); 2 heads of 32 channels (16 pairs: 12 spatial, 4 temporal, the
reference's ``mrope_section`` (4, 6, 6)), theta 1e6 (Qwen2-VL's). The file holds q and k (rotate-half order), each
channel's axis as the reference's rotation reads it, the position ids and the logits of the rotated q and k of the video
tokens, in float32 (the reference computes its angles in float32).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from types import SimpleNamespace

import torch
import transformers

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'videorope.pt')
COMMIT = '7712ca3f52b795284e0453badc6cf1642c1368c4'
PATH = 'videorope-transformer/modeling_videorope.py'
HEADS, HEAD_DIM, THETA, DELTA = 2, 32, 1e6, 2.0
SECTION = [4, 6, 6]  # t pairs, then h and w: 16 = HEAD_DIM / 2
GRID, MERGE = (2, 3, 4), 2
VISION_START, VIDEO = 151652, 151656  # Qwen2-VL's token ids


def load(root: str):
    name = 'transformers.models.qwen2_vl.modeling_videorope'
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, PATH))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(root: str) -> None:
    assert transformers.__version__ == '4.45.2', f'record with transformers 4.45.2, found {transformers.__version__}'
    ref = load(root)
    t, h, w = GRID
    n = t * h * w
    config = SimpleNamespace(
        vision_config=SimpleNamespace(spatial_merge_size=MERGE),
        image_token_id=151655, video_token_id=VIDEO, vision_start_token_id=VISION_START,
    )  # fmt: skip
    input_ids = torch.tensor([[VISION_START] + [VIDEO] * n])
    thw = torch.tensor([[t, h * MERGE, w * MERGE]])
    position_ids, _ = ref.Qwen2VLForConditionalGeneration.get_t_scale_rope_index(
        SimpleNamespace(config=config), input_ids, None, thw, torch.ones_like(input_ids), scale_factor=DELTA
    )  # (3, 1, 1 + n): t, h, w ids
    text = ref.Qwen2VLConfig(
        hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, rope_theta=THETA,
        rope_scaling={'type': 'mrope', 'mrope_section': list(SECTION)},
    )  # fmt: skip
    rotary = ref.Qwen2VLRotaryEmbedding(config=text)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, 1 + n, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, 1 + n, HEAD_DIM, generator=generator)
    cos, sin = rotary(q, position_ids)
    q_rot, k_rot = ref.apply_m_modify_multimodal_rotary_pos_emb(q, k, cos, sin, list(SECTION))
    # each channel's axis as the rotation reads it: cos holding the axis index (0 t, 1 h, 2 w), sin 0, q all ones
    marker = torch.arange(3.0)[:, None, None, None].expand(3, 1, 1, HEAD_DIM)
    axis, _ = ref.apply_m_modify_multimodal_rotary_pos_emb(
        torch.ones(1, 1, 1, HEAD_DIM), torch.ones(1, 1, 1, HEAD_DIM), marker, torch.zeros_like(marker), list(SECTION)
    )
    source = inspect.getsource(ref.apply_m_modify_multimodal_rotary_pos_emb) + inspect.getsource(
        ref.Qwen2VLForConditionalGeneration.get_t_scale_rope_index
    )
    video = slice(1, None)  # the tokens after the vision-start token
    record = {
        'reference': f'Wiselnn570/VideoRoPE@{COMMIT}:{PATH}:get_t_scale_rope_index, Qwen2VLRotaryEmbedding, '
        'apply_m_modify_multimodal_rotary_pos_emb',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'theta': THETA, 'delta': DELTA, 'mrope_section': SECTION,
        'grid': list(GRID), 'channel_axis': axis.flatten().long(),
        'position_ids': position_ids[:, 0, video].float().clone(),
        'q': q[..., video, :].clone(), 'k': k[..., video, :].clone(),
        'logits': q_rot[..., video, :] @ k_rot[..., video, :].transpose(-2, -1),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '/tmp/ref/VideoRoPE')
