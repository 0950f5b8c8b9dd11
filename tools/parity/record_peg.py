"""Record CPVT's Positional Encoding Generator into tests/data/parity/peg.pt, which tests/parity/test_parity_twins.py
compares vispe's ``peg`` with.

CPVT's repository (Meituan-AutoML/CPVT) holds no code: its README points to Twins, where the authors released it.
The reference is Meituan-AutoML/Twins at commit c1ff6714969ad8ef330e75cf97bd310f7488f529, ``gvt.py``: ``PosCNN``
(the PEG: x + DWConv3x3(x) on the token grid, zero padding, with bias; ``s=1`` as ``CPVTV2`` builds it, which
applies it after the first block of each stage). It runs as it is, in float64, with weights drawn here (recorded,
and copied into vispe by the test), from a local copy of the repository (gvt.py imports timm, one of vispe's
dependencies):

    git clone https://github.com/Meituan-AutoML/Twins /tmp/ref/Twins
    git -C /tmp/ref/Twins checkout c1ff6714969ad8ef330e75cf97bd310f7488f529
    PYTHONPATH=/tmp/ref/Twins python tools/parity/record_peg.py
"""

from __future__ import annotations

import hashlib
import inspect
import os
import warnings

import torch

with warnings.catch_warnings():  # gvt.py imports timm's deprecated module paths
    warnings.simplefilter('ignore', FutureWarning)
    import gvt  # Twins' gvt.py

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'peg.pt')
COMMIT = 'c1ff6714969ad8ef330e75cf97bd310f7488f529'
DIM, GRID, BATCH = 6, (3, 4), 2  # width, the (h, w) token grid (not square, so rows and columns differ)


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    peg = gvt.PosCNN(DIM, DIM).double()
    weight = torch.randn(peg.proj[0].weight.shape, generator=generator, dtype=torch.float64) * 0.3
    bias = torch.randn(DIM, generator=generator, dtype=torch.float64) * 0.1
    with torch.no_grad():
        peg.proj[0].weight.copy_(weight)
        peg.proj[0].bias.copy_(bias)
    x = torch.randn(BATCH, GRID[0] * GRID[1], DIM, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        out = peg(x, *GRID)
    record = {
        'reference': f'Meituan-AutoML/Twins@{COMMIT}:gvt.py:PosCNN',
        'source_sha256': hashlib.sha256(inspect.getsource(gvt.PosCNN).encode()).hexdigest(),
        'dim': DIM, 'grid': list(GRID), 'weight': weight, 'bias': bias, 'x': x, 'out': out,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
