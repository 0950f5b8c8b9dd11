"""Record CSWin's locally-enhanced positional encoding (LePE) into tests/data/parity/lepe.pt, which
tests/parity/test_parity_cswin.py compares vispe's ``lepe`` with.

The reference is microsoft/CSWin-Transformer at commit f111ae2f771df32006e7afd7916835dd67d4cb9d, ``models/cswin.py``:
``CSWinBlock`` in its last-stage form (``split_size`` equal to the resolution, so one ``LePEAttention`` with
``idx=-1`` attends over the whole token map: vispe's setting, global attention), whose ``LePEAttention.get_lepe``
adds DWConv3x3(V) (``get_v``, zero padding, with bias) to softmax(q k^T / sqrt(d)) V before the output projection.
The block runs as it is, in float64, with PyTorch's default initialisation under a fixed seed; forward hooks
record what its attention branch receives (the normalised tokens) and what it returns (after ``proj``). From a
local copy of the repository (models/cswin.py imports timm, one of vispe's dependencies, and einops):

    git clone https://github.com/microsoft/CSWin-Transformer /tmp/ref/CSWin-Transformer
    git -C /tmp/ref/CSWin-Transformer checkout f111ae2f771df32006e7afd7916835dd67d4cb9d
    pip install --target /tmp/ref-deps --no-deps einops==0.8.2
    PYTHONPATH=/tmp/ref/CSWin-Transformer:/tmp/ref-deps python tools/parity/record_lepe.py
"""

from __future__ import annotations

import hashlib
import inspect
import os
import warnings

import torch

with warnings.catch_warnings():  # cswin.py imports timm's deprecated module paths
    warnings.simplefilter('ignore', FutureWarning)
    from models import cswin  # CSWin-Transformer's models/cswin.py

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'lepe.pt')
COMMIT = 'f111ae2f771df32006e7afd7916835dd67d4cb9d'
DIM, HEADS, SIDE, BATCH = 8, 2, 4, 2  # width, heads, the square grid's side (CSWin's maps are square)


def main() -> None:
    torch.manual_seed(0)
    block = cswin.CSWinBlock(DIM, SIDE, HEADS, split_size=SIDE).double().eval()
    assert block.branch_num == 1 and block.attns[0].H_sp == block.attns[0].W_sp == SIDE  # global attention
    seen: dict[str, torch.Tensor] = {}
    block.norm1.register_forward_hook(lambda m, i, o: seen.__setitem__('attn_input', o))
    block.proj.register_forward_hook(lambda m, i, o: seen.__setitem__('attn_output', o))
    x = torch.randn(BATCH, SIDE * SIDE, DIM, dtype=torch.float64)
    with torch.no_grad():
        block(x)
    conv = block.attns[0].get_v
    source = inspect.getsource(cswin.LePEAttention) + inspect.getsource(cswin.CSWinBlock)
    record = {
        'reference': f'microsoft/CSWin-Transformer@{COMMIT}:models/cswin.py:LePEAttention.get_lepe',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'heads': HEADS, 'grid': [SIDE, SIDE],
        'qkv_weight': block.qkv.weight.detach(), 'proj_weight': block.proj.weight.detach(),
        'proj_bias': block.proj.bias.detach(), 'conv_weight': conv.weight.detach(), 'conv_bias': conv.bias.detach(),
        'attn_input': seen['attn_input'], 'attn_output': seen['attn_output'],
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
