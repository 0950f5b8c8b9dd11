"""Record iRPE (Wu et al., ICCV 2021) from its authors' code into tests/data/parity/irpe.pt, which
tests/parity/test_parity_cream.py compares vispe's ``irpe`` with.

The reference is microsoft/Cream at commit 4a13c4091e78f9abd2160e7e01c02e48c1cf8fb9,
``iRPE/DeiT-with-iRPE/irpe.py``: ``get_rpe_config`` and ``build_rpe`` build the modules on q, k and v, whose
``forward`` (``iRPE`` and ``iRPE_Cross``, on their pure-PyTorch path: the ``rpe_ops`` CUDA op is not built) returns
the logit terms (on K: ``rpe_k(q * scale)``; on Q: ``rpe_q(k * scale)`` transposed, as its DeiT attention in
``rpe_vision_transformer.py`` adds them) and the value term (``rpe_v(attn)``). The bucket tables come from its
``piecewise_index`` and ``get_bucket_ids_2d``. It runs as it is, from a local copy of the repository; it needs
``easydict`` (not part of vispe's requirements, and not needed by the test):

    git clone https://github.com/microsoft/Cream /tmp/ref/Cream   # then check out the commit above
    pip install --target /tmp/ref-irpe --no-deps easydict==1.13
    PYTHONPATH=/tmp/ref-irpe:/tmp/ref/Cream/iRPE/DeiT-with-iRPE python tools/parity/record_irpe.py

Every configuration runs on a 3 x 5 grid with one prefix (cls) token, 2 heads of 8 channels, in float64, at ratio
1.9 (the paper's; b = 3, so the 4-column offsets saturate) but quant's at 3.0 (b = 6: its squared distances 1 to 20
then fall on both sides of alpha and on the logarithmic part, where gamma decides the bucket). The lookup tables
start at zero in the reference; here they are drawn from N(0, 1) on the reference's side and recorded, for the test
to copy into vispe. Configurations: vispe's default (product, contextual, on K, shared by the heads), product
contextual on Q, K and V per head, cross with a scalar bias per head and contextual on Q and K, and euclidean and
quant contextual on K.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import irpe as ref  # the authors' module (iRPE/DeiT-with-iRPE/irpe.py)
import torch

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'irpe.pt')
COMMIT = '4a13c4091e78f9abd2160e7e01c02e48c1cf8fb9'
HEADS, HEAD_DIM, GRID, SKIP = 2, 8, (3, 5), 1
#: name -> (method, mode, on, shared_head, ratio)
CONFIGS = {
    'product_contextual_k_shared': ('product', 'contextual', 'k', True, 1.9),
    'product_contextual_qkv_heads': ('product', 'contextual', 'qkv', False, 1.9),
    'cross_bias_k_heads': ('cross', 'bias', 'k', False, 1.9),
    'cross_contextual_qk_shared': ('cross', 'contextual', 'qk', True, 1.9),
    'euclidean_contextual_k_shared': ('euc', 'contextual', 'k', True, 1.9),
    'quant_contextual_k_shared': ('quant', 'contextual', 'k', True, 3.0),
}


def tables(module: torch.nn.Module, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Draw the module's lookup tables from N(0, 1) in place; return them by name ('' or '_rows' / '_cols')."""
    parts = {'_rows': module.rp_rows, '_cols': module.rp_cols} if isinstance(module, ref.iRPE_Cross) else {'': module}
    out = {}
    with torch.no_grad():
        for suffix, part in parts.items():
            table = part.lookup_table_bias if part.mode == 'bias' else part.lookup_table_weight
            table.copy_(torch.randn(table.shape, generator=generator, dtype=torch.float64))
            out[suffix] = table.detach().clone()
    return out


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    tokens = SKIP + GRID[0] * GRID[1]
    q, k, v = (torch.randn(1, HEADS, tokens, HEAD_DIM, generator=generator, dtype=torch.float64) for _ in range(3))
    attn = torch.randn(1, HEADS, tokens, tokens, generator=generator, dtype=torch.float64).softmax(-1)
    scale = HEAD_DIM**-0.5
    functions = (ref.piecewise_index, ref.get_bucket_ids_2d, ref.iRPE, ref.build_rpe)
    source = ''.join(inspect.getsource(f) for f in functions)
    record = {
        'reference': f'microsoft/Cream@{COMMIT}:iRPE/DeiT-with-iRPE/irpe.py:get_rpe_config,build_rpe,iRPE.forward',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'grid': list(GRID), 'num_prefix': SKIP,
        'q': q, 'k': k, 'v': v, 'attn': attn, 'configs': list(CONFIGS),
    }  # fmt: skip
    for name, (method, mode, on, shared, ratio) in CONFIGS.items():
        record[f'{name}/ratio'] = ratio
        config = ref.get_rpe_config(ratio=ratio, method=method, mode=mode, shared_head=shared, skip=SKIP, rpe_on=on)
        rpe_q, rpe_k, rpe_v = ref.build_rpe(config, head_dim=HEAD_DIM, num_heads=HEADS)
        bias = torch.zeros(1, HEADS, tokens, tokens, dtype=torch.float64)
        for side, module in zip('qkv', (rpe_q, rpe_k, rpe_v)):
            if module is None:
                continue
            module.double()
            for suffix, table in tables(module, generator).items():
                record[f'{name}/table_{side}{suffix}'] = table
            if side == 'k':  # the DeiT attention: attn += rpe_k(q * scale)
                bias = bias + module(q * scale, height=GRID[0], width=GRID[1])
            elif side == 'q':  # attn += rpe_q(k * scale).transpose(2, 3)
                bias = bias + module(k * scale, height=GRID[0], width=GRID[1]).transpose(2, 3)
            else:  # out += rpe_v(attn)
                record[f'{name}/value_term'] = module(attn, height=GRID[0], width=GRID[1]).detach()
        record[f'{name}/bias'] = bias.detach()
        bucket_ids, num_buckets = ref.get_bucket_ids_2d(
            method=ref.METHOD.CROSS_ROWS if method == 'cross' else config.rpe_k.method, height=GRID[0],
            width=GRID[1], skip=SKIP, alpha=config.rpe_k.alpha, beta=config.rpe_k.beta, gamma=config.rpe_k.gamma,
        )  # fmt: skip
        record[f'{name}/bucket_ids'] = bucket_ids.to(torch.int8)  # ids < 50: a few bytes
        record[f'{name}/num_buckets'] = int(num_buckets)
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
