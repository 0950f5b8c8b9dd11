"""Record CROMA's 2D ALiBi into tests/data/parity/alibi2d.pt, which tests/parity/test_parity_croma.py compares vispe's
``alibi2d`` with.

ALiBi's authors (Press et al.) released it for causal text only; the 2D form vispe implements, -m_h times the
Euclidean distance between two patches in patch units, with ALiBi's slopes, is CROMA's (Fuller et al., NeurIPS
2023). The reference is antofuller/CROMA at commit 59505a6bcadbf36ba20767270154bf9f3067c5e7, ``use_croma.py``:
``get_2dalibi`` (the (1, H, N, N) bias of a square grid; its slopes follow ALiBi's ``get_slopes``, including the
rule for head counts that are not powers of two) and ``Attention`` (which adds that bias to q k^T / sqrt(d) before the
softmax). They run as they are, ``Attention`` in float64 with PyTorch's default initialisation under a fixed seed (a
forward hook records its normalised input, since its LayerNorm is part of the block in vispe), from a local copy of
the repository (use_croma.py imports einops):

    git clone https://github.com/antofuller/CROMA /tmp/ref/CROMA
    git -C /tmp/ref/CROMA checkout 59505a6bcadbf36ba20767270154bf9f3067c5e7
    pip install --target /tmp/ref-deps --no-deps einops==0.8.2
    PYTHONPATH=/tmp/ref/CROMA:/tmp/ref-deps python tools/parity/record_alibi2d.py

``get_2dalibi`` works in float32 (its slopes are a float32 tensor), so the biases are float32.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import torch
import use_croma  # CROMA's use_croma.py

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'alibi2d.pt')
COMMIT = '59505a6bcadbf36ba20767270154bf9f3067c5e7'
HEADS, SIDE = (8, 6), 3  # a power of two and a count that is not one; the square grid's side
DIM, BATCH = 12, 2  # the attention's width (6 heads of 2 channels) and batch


def main() -> None:
    biases = {str(h): use_croma.get_2dalibi(num_heads=h, num_patches=SIDE * SIDE) for h in HEADS}
    torch.manual_seed(0)
    attn = use_croma.Attention(DIM, num_heads=HEADS[1]).double().eval()
    seen: dict[str, torch.Tensor] = {}
    attn.input_norm.register_forward_hook(lambda m, i, o: seen.__setitem__('attn_input', o))
    x = torch.randn(BATCH, SIDE * SIDE, DIM, dtype=torch.float64)
    with torch.no_grad():
        out = attn(x, relative_position_bias=biases[str(HEADS[1])].double())
    source = inspect.getsource(use_croma.get_2dalibi) + inspect.getsource(use_croma.Attention)
    record = {
        'reference': f'antofuller/CROMA@{COMMIT}:use_croma.py:get_2dalibi',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': list(HEADS), 'grid': [SIDE, SIDE], 'biases': biases,
        'dim': DIM, 'qkv_weight': attn.to_qkv.weight.detach(), 'proj_weight': attn.to_out.weight.detach(),
        'proj_bias': attn.to_out.bias.detach(), 'attn_input': seen['attn_input'], 'attn_output': out,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
