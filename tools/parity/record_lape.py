"""Record LaPE (Yu et al., ICCV 2023) into tests/data/parity/lape.pt, which tests/parity/test_parity_lape.py compares
vispe's ``lape=True`` option of the absolute encodings (``vispe.encodings.lape.LayerAdaptive``) with.

The reference is the authors' repository Ingrid725/LaPE at commit e188f7e56126b788c28afca0454c57b7d033b963,
``vision_transformer.py``: ``VisionTransformer(join_type='LaPE', pe='learnable')``, whose ``forward_features`` hands
each ``Block`` the position table and takes back the block's normalised one (``pos_embed = self.pe_norm(pos_embed)``,
then ``self.attn(self.norm1(x) + pos_embed)``): block l's attention reads LN_l(x_l) + P_l, P_l = LN'_l(P_(l-1)).
The module is imported as it is; it imports timm (the installed 1.0.31 serves its imports: ``DropPath``,
``trunc_normal_``, the model registry; the authors pin 0.3.2, whose code no longer imports under torch 2). Run:

    git --git-dir=<mirror of Ingrid725/LaPE> archive HEAD | tar -x -C /tmp/ref/LaPE
    python tools/parity/record_lape.py /tmp/ref/LaPE

A small DeiT of theirs (16 px images of 4 px patches: a 4 x 4 grid and the cls token; width 16, 3 blocks, 2 heads,
LayerNorm eps 1e-6 as their DeiT models), seed 0, run in float64 on one random image. Their LaPE norms start as
LayerNorms do (weight 1, bias 0); they are drawn at random here (weight 1 + N(0, 0.5^2), bias N(0, 0.1^2)) so that
each layer's differs. Recorded: the table (cls row first), every LaPE norm's weight and bias, and for every block its
normalised input LN_l(x_l) and the input of its attention.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from functools import partial

import torch
from torch import nn

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'lape.pt')
COMMIT = 'e188f7e56126b788c28afca0454c57b7d033b963'
IMG, PATCH, DIM, DEPTH, HEADS = 16, 4, 16, 3, 2


def main(root: str) -> None:
    sys.path.insert(0, root)
    import vision_transformer as ref

    torch.manual_seed(0)
    model = ref.VisionTransformer(
        img_size=IMG, patch_size=PATCH, num_classes=0, embed_dim=DIM, depth=DEPTH, num_heads=HEADS, qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), pe='learnable', join_type='LaPE',
    ).double().eval()  # fmt: skip
    with torch.no_grad():
        for blk in model.blocks:
            blk.pe_norm.weight.copy_(1 + 0.5 * torch.randn(DIM, dtype=torch.float64))
            blk.pe_norm.bias.copy_(0.1 * torch.randn(DIM, dtype=torch.float64))
    normed, attn_in = [], []
    hooks = []
    for blk in model.blocks:
        hooks.append(blk.norm1.register_forward_hook(lambda m, i, o: normed.append(o.detach().clone())))
        hooks.append(blk.attn.register_forward_pre_hook(lambda m, i: attn_in.append(i[0].detach().clone())))
    image = torch.randn(1, 3, IMG, IMG, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.forward_features(image)
    for hook in hooks:
        hook.remove()
    source = inspect.getsource(ref.Block) + inspect.getsource(ref.VisionTransformer.forward_features)
    record = {
        'reference': f'Ingrid725/LaPE@{COMMIT}:vision_transformer.py:Block.forward, '
        "VisionTransformer.forward_features (join_type='LaPE')",
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'depth': DEPTH, 'grid': [IMG // PATCH, IMG // PATCH],
        'pos_embed': model.pos_embed.detach().clone(),
        'norm_weight': torch.stack([blk.pe_norm.weight.detach() for blk in model.blocks]),
        'norm_bias': torch.stack([blk.pe_norm.bias.detach() for blk in model.blocks]),
        'normed': torch.stack(normed), 'attn_input': torch.stack(attn_in),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '/tmp/ref/LaPE')
