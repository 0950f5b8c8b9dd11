"""Record YaRN's attention temperature and frequency tables, and position interpolation's, as Hugging Face
transformers computes them into tests/data/parity/yarn_temperature.pt, which tests/parity/test_parity_transformers.py
compares ``vispe.encodings.rotary_scaling.yarn_mscale`` and the rotary encodings' ``yarn`` and ``interpolate`` with.

The reference is transformers 4.57.1 (the tagged release v4.57.1), ``transformers/modeling_rope_utils.py``:
``_compute_yarn_parameters`` returns the inverse frequencies and the ``attention_factor`` that multiplies cos and
sin, so q and k each (the YaRN paper's sqrt(1/t) = 0.1 ln s + 1; the logits grow by its square), and
``_compute_linear_scaling_rope_parameters`` those of position interpolation. The tables are recorded for one
rotary ladder (the head dim of the config: one axis of an image encoding), on training extents from an LLM's down
to a ViT's, where YaRN's ramp ends meet the ladder's ends. Run it from an
installed copy of that release (see tools/parity/record_mrope.py for the commands):

    PYTHONPATH=/tmp/tfenv python tools/parity/record_yarn.py
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import _compute_linear_scaling_rope_parameters, _compute_yarn_parameters

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'yarn_temperature.pt')
FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0)
#: (pairs, theta, training extent, factor)
TABLES = (
    (8, 100.0, 256, 2.0),
    (8, 100.0, 4096, 2.0),
    (28, 10000.0, 64, 2.0),
    (16, 100.0, 14, 2.0),
    (16, 100.0, 16, 4.0),
    (8, 100.0, 32, 1.5),
    (8, 100.0, 6, 2.0),
    (4, 100.0, 4, 2.0),
    (16, 100.0, 4, 2.0),
)


def tables() -> list[dict]:
    out = []
    for pairs, theta, train, factor in TABLES:
        common = {'hidden_size': 2 * pairs, 'num_attention_heads': 1, 'rope_theta': theta}
        yarn = LlamaConfig(
            **common, max_position_embeddings=int(train * factor),
            rope_scaling={'rope_type': 'yarn', 'factor': factor, 'original_max_position_embeddings': train},
        )  # fmt: skip
        linear = LlamaConfig(**common, rope_scaling={'rope_type': 'linear', 'factor': factor})
        out.append(
            {
                'pairs': pairs, 'theta': theta, 'train': train, 'factor': factor,
                'yarn': _compute_yarn_parameters(yarn, 'cpu')[0].double(),
                'linear': _compute_linear_scaling_rope_parameters(linear, 'cpu')[0].double(),
            }
        )  # fmt: skip
    return out


def main() -> None:
    assert transformers.__version__ == '4.57.1', f'record from transformers 4.57.1, found {transformers.__version__}'
    factors = []
    for factor in FACTORS:
        config = LlamaConfig(
            hidden_size=64, num_attention_heads=2, max_position_embeddings=int(64 * factor),
            rope_scaling={'rope_type': 'yarn', 'factor': factor, 'original_max_position_embeddings': 64},
        )  # fmt: skip
        _, attention_factor = _compute_yarn_parameters(config, 'cpu')
        factors.append(attention_factor)
    record = {
        'reference': 'huggingface/transformers v4.57.1, modeling_rope_utils.py: _compute_yarn_parameters',
        'source_sha256': hashlib.sha256(inspect.getsource(_compute_yarn_parameters).encode()).hexdigest(),
        'scales': torch.tensor(FACTORS, dtype=torch.float64),
        'attention_factor': torch.tensor(factors, dtype=torch.float64),
        'tables': tables(),
    }
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
