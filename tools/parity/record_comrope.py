"""Record ComRoPE-AP and ComRoPE-LD (Yu et al., CVPR 2025) from their authors' code into
tests/data/parity/comrope_ap.pt and comrope_ld.pt, which tests/parity/test_parity_comrope.py compares vispe's
``comrope_ap`` and ``comrope_ld`` with.

The reference is Longin-Yu/ComRoPE at commit 7aeef083f8af53479d0e86af562029bd89af6422, ``model.py``:
``ComRoPEAPAttention`` and ``ComRoPELDAttention`` (their ``get_exponent_matrix`` and the shared
``RoPESelfAttentionBase.get_rotation_matrix``: R(x) = matrix_exp(sum_i x_i A_i) as a dense block-diagonal d x d
matrix per token, multiplied into q and k in ``forward``), on the positions of ``CustomVITConfig.get_positions``
((r + 0.5) / n per axis, the cls token at its default ``cls_position`` 0.5). The attention layer's ``forward`` runs as
it is, with ``output_attentions=True``, from a local copy of the repository; its classes extend transformers' CLIP
attention, so it needs the transformers release of its requirements.txt (not part of vispe's requirements, and not
needed by the test):

    git clone https://github.com/Longin-Yu/ComRoPE /tmp/ref/ComRoPE   # then check out the commit above
    pip install --target /tmp/ref-comrope --no-deps transformers==4.46.2 tokenizers==0.20.3 \
        huggingface-hub==0.26.2 regex fsspec
    PYTHONPATH=/tmp/ref-comrope:/tmp/ref/ComRoPE python tools/parity/record_comrope.py

A 4 x 4 grid and its cls token, 2 heads of 16 channels, block sizes 2, 4 (vispe's default) and 8, in float64 (the
default dtype is set to float64, so the reference's dense rotation is float64 too). The generators are drawn from
N(0, 1) (LD's multipliers too) by the reference's own initialisation and recorded; q and k come from recorded
random projections of recorded tokens, v is the tokens themselves (identity v and output projections), so the
file holds the tokens, the q / k projections, the generators and the reference's softmax weights (its output is
those weights times the tokens).
"""

from __future__ import annotations

import hashlib
import inspect
import os

import model as ref  # the authors' module (model.py)
import torch
import transformers

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity')
COMMIT = '7aeef083f8af53479d0e86af562029bd89af6422'
HEADS, HEAD_DIM, SIDE, BLOCKS = 2, 16, 4, (2, 4, 8)
CLASSES = {'comrope_ap': ('comrope-ap', ref.ComRoPEAPAttention), 'comrope_ld': ('comrope-ld', ref.ComRoPELDAttention)}


def main() -> None:
    assert transformers.__version__ == '4.46.2', f'record with transformers 4.46.2, found {transformers.__version__}'
    torch.set_default_dtype(torch.float64)
    width = HEADS * HEAD_DIM
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(1, 1 + SIDE * SIDE, width, generator=generator)
    proj = {n: torch.randn(width, width, generator=generator) / width**0.5 for n in ('q', 'k')}
    bias = {n: torch.randn(width, generator=generator) * 0.1 for n in ('q', 'k')}
    for name, (pe_type, cls) in CLASSES.items():
        source = inspect.getsource(cls) + inspect.getsource(ref.RoPESelfAttentionBase)
        record = {
            'reference': f'Longin-Yu/ComRoPE@{COMMIT}:model.py:{cls.__name__}.forward',
            'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
            'heads': HEADS, 'head_dim': HEAD_DIM, 'grid': [SIDE, SIDE], 'num_prefix': 1, 'cls_position': 0.5,
            'block_sizes': list(BLOCKS), 'tokens': tokens, 'q_weight': proj['q'], 'q_bias': bias['q'],
            'k_weight': proj['k'], 'k_bias': bias['k'],
        }  # fmt: skip
        for block in BLOCKS:
            config = ref.CustomVITConfig(
                custom_pe_type=pe_type, hidden_size=width, num_attention_heads=HEADS, image_size=SIDE * 4,
                patch_size=4, block_size=block, num_axes=2, init_std=1.0, attention_dropout=0.0,
            )  # fmt: skip
            torch.manual_seed(block)  # the reference draws its generators from the global generator
            attn = cls(config).eval()
            with torch.no_grad():
                for n in ('q', 'k'):
                    getattr(attn, f'{n}_proj').weight.copy_(proj[n])
                    getattr(attn, f'{n}_proj').bias.copy_(bias[n])
                for n in ('v', 'out'):
                    getattr(attn, f'{n}_proj').weight.copy_(torch.eye(width))
                    getattr(attn, f'{n}_proj').bias.zero_()
                attn.set_positions(config.get_positions().unsqueeze(0))  # (1, 1 + n * n, 2), cls first
                _, weights = attn(tokens, output_attentions=True)
            record[f'b{block}/freqs'] = attn.freqs.detach().clone()  # (H, 1, J, b, b)
            if name == 'comrope_ld':
                record[f'b{block}/multiplier'] = attn.multiplier.detach().clone()  # (1, ndim, J, 1, 1)
            record[f'b{block}/attn'] = weights
        torch.save(record, os.path.join(OUT, f'{name}.pt'))
        print(f'wrote {os.path.normpath(os.path.join(OUT, name))}.pt')


if __name__ == '__main__':
    main()
