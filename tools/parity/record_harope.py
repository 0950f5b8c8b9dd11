"""Record HARoPE (Li et al., CVPR 2026) from its authors' code into tests/data/parity/harope.pt, which
tests/parity/test_parity_harope.py compares vispe's ``harope`` with.

The reference is Studentxll/HARoPE at commit bf3d5c9a93ef32edbbda570f1c613895632e1d37, ``model/models_HARoPE.py``:
``SVDBasedMatrix.forward`` (U = matrix_exp((A_u - A_u^T) / 2), V likewise, s = softplus(sigma) + 1e-6, M and M^-1),
``RotaryPosEmbed`` on ``prepare_latent_ids`` (2D axial RoPE, theta = 10000, the rows on the first half of the channels),
``apply_rotary_emb``, and ``Attention.forward``, which multiplies q by M^T and k by M^-1 before the rotation. The
recorder calls these as ``Attention.forward`` does for the logits (q @ M^T, k @ M^-1, then ``apply_rotary_emb``), and
runs ``Attention.forward`` itself (its unfused path) for the output tokens. It runs from a local copy of the
repository (its git snapshot lacks a large figure, so the files are taken one by one); the module imports only torch,
numpy and timm, all in vispe's environment:

    git clone https://github.com/Studentxll/HARoPE /tmp/ref/HARoPE   # then check out the commit above
    PYTHONPATH=/tmp/ref/HARoPE/model python tools/parity/record_harope.py

A DiT-style 3 x 4 latent grid (no cls token), 2 heads of 16 channels, float64 parameters (the reference computes its
cos / sin tables and the rotation in float32). A_u, A_v ~ N(0, 0.5^2) and sigma ~ N(0.54, 0.5^2) replace the
reference's identity init (A = 0, softplus(sigma) = 1) so that M is far from the identity; q, k and v come from the
recorded tokens through the recorded q and k projections and an identity v projection (and output projection).
"""

from __future__ import annotations

import hashlib
import inspect
import os

import models_HARoPE as ref  # the authors' module (model/models_HARoPE.py)
import torch

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'harope.pt')
COMMIT = 'bf3d5c9a93ef32edbbda570f1c613895632e1d37'
HEADS, HEAD_DIM, GRID, THETA = 2, 16, (3, 4), 10000


def main() -> None:
    torch.set_default_dtype(torch.float64)
    generator = torch.Generator().manual_seed(0)
    width, tokens = HEADS * HEAD_DIM, GRID[0] * GRID[1]
    x = torch.randn(1, tokens, width, generator=generator)
    w_q, w_k = (torch.randn(width, width, generator=generator) / width**0.5 for _ in range(2))
    attention = ref.Attention(width, num_heads=HEADS, qkv_bias=False).eval()
    attention.fused_attn = False  # the explicit softmax path (the fused one computes the same)
    rot = attention.learnable_rot
    with torch.no_grad():
        rot.A_u.copy_(torch.randn(rot.A_u.shape, generator=generator) * 0.5)
        rot.A_v.copy_(torch.randn(rot.A_v.shape, generator=generator) * 0.5)
        rot.sigma.copy_(torch.randn(rot.sigma.shape, generator=generator) * 0.5 + 0.54)
        attention.qkv.weight.copy_(torch.cat([w_q, w_k, torch.eye(width)]))
        attention.proj.weight.copy_(torch.eye(width))
        attention.proj.bias.zero_()
        emb = ref.RotaryPosEmbed(theta=THETA, axes_dim=(HEAD_DIM // 2, HEAD_DIM // 2))(ref.prepare_latent_ids(*GRID))
        out = attention(x, emb)
        # the logits, as Attention.forward forms them: q @ M^T and k @ M^-1, then the rotary embedding
        q = (x @ w_q.T).unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)
        k = (x @ w_k.T).unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)
        m, m_inv = rot()
        q_rot = ref.apply_rotary_emb(q @ m.transpose(-1, -2), emb)
        k_rot = ref.apply_rotary_emb(k @ m_inv, emb)
    source = ''.join(inspect.getsource(f) for f in (ref.SVDBasedMatrix, ref.Attention, ref.RotaryPosEmbed))
    source += inspect.getsource(ref.get_1d_rotary_pos_embed) + inspect.getsource(ref.apply_rotary_emb)
    record = {
        'reference': f'Studentxll/HARoPE@{COMMIT}:model/models_HARoPE.py:SVDBasedMatrix.forward,RotaryPosEmbed,'
        'apply_rotary_emb,Attention.forward',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'grid': list(GRID), 'theta': float(THETA),
        'x': x, 'q_weight': w_q, 'k_weight': w_k, 'A_u': rot.A_u.detach().clone(), 'A_v': rot.A_v.detach().clone(),
        'sigma': rot.sigma.detach().clone(), 'logits': q_rot @ k_rot.transpose(-1, -2), 'out': out,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
