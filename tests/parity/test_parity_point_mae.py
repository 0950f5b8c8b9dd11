"""Parity with Point-MAE (Pang-Yatian/Point-MAE; recorder: tools/parity/record_point_mlp.py): the MLP of the group
centres added to the tokens before every block, in its pretraining encoder (``MaskTransformer``) and in its classifier
(``PointTransformer``, whose cls token has a learned ``cls_pos``: ``point_mlp(prefix_pos=True)``)."""

from __future__ import annotations

import torch
from recorded import recorded

from vispe.backbones.point import PointTransformer
from vispe.positions import Positions

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('point_mlp',)


def point_transformer(record: dict, prefix_pos: bool = False) -> PointTransformer:
    """vispe's point transformer with point_mlp and the recorded weights (Point-MAE's blocks have no qkv bias: zero
    here; its LayerNorms have PyTorch's eps 1e-5, vispe's timm blocks 1e-6: set to Point-MAE's for the comparison),
    in float64."""
    model = PointTransformer(
        num_classes=4, encoding={'type': 'point_mlp', 'prefix_pos': prefix_pos}, embed_dim=record['dim'],
        depth=record['depth'], num_heads=record['heads'], drop_path_rate=0.0,
    ).double().eval()  # fmt: skip
    enc = model.pe['point_mlp']
    with torch.no_grad():
        enc.mlp.load_state_dict(record['pos_embed'])
        for block, weights in zip(model.blocks, record['blocks'], strict=True):
            qkv_bias = torch.zeros(3 * record['dim'])
            block.load_state_dict({**weights, 'attn.qkv.bias': qkv_bias})
            block.norm1.eps = block.norm2.eps = 1e-5
    return model


def run_blocks(model: PointTransformer, tokens: torch.Tensor, center: torch.Tensor, cls: torch.Tensor | None):
    """The group tokens through vispe's backbone protocol: the embed hooks, the cls token (if any) in front, then
    every block with its after_block hooks."""
    pos = Positions(coords=center, num_prefix=0 if cls is None else 1)
    x = model.encoding_stack.embed(tokens, pos)
    if cls is not None:
        x = torch.cat([cls.expand(x.shape[0], -1, -1), x], dim=1)
    return model.run_blocks(x, pos)


def test_encoder_matches_point_mae() -> None:
    """Point-MAE's pretraining encoder (2 blocks, no cls token): from the same group tokens and centres, vispe's
    blocks with point_mlp return the same tokens, in float64 (the MLP added before block 0 by ``embed`` and before
    block 1 by ``after_block``). Added before block 0 only (depth=None), they would differ."""
    record = recorded('point_mlp')
    model = point_transformer(record)
    assert model.pe['point_mlp'].blocks == (0,)
    with torch.no_grad():
        out = run_blocks(model, record['tokens'], record['center'], None)
        torch.testing.assert_close(out, record['encoder_out'], atol=1e-10, rtol=1e-10)
        model.pe['point_mlp'].blocks = ()
        once = run_blocks(model, record['tokens'], record['center'], None)
    assert (once - record['encoder_out']).abs().max() > 0.05


def test_classifier_cls_pos_matches_point_mae_with_prefix_pos() -> None:
    """Point-MAE's classifier: its cls token enters block 0 as cls_token + cls_pos and gets cls_pos again before
    block 1. vispe with ``prefix_pos=True`` (the backbone's cls token holding cls_token + cls_pos, the encoding's
    ``prefix_pos`` cls_pos) returns the same tokens; vispe's default (prefix tokens get no position) does not."""
    record = recorded('point_mlp')
    cls = record['cls_token'].double() + record['cls_pos'].double()
    model = point_transformer(record, prefix_pos=True)
    with torch.no_grad():
        model.pe['point_mlp'].prefix_pos.copy_(record['cls_pos'])
        out = run_blocks(model, record['tokens'], record['center'], cls)
        default = run_blocks(point_transformer(record), record['tokens'], record['center'], cls)
    torch.testing.assert_close(out, record['classifier_out'], atol=1e-10, rtol=1e-10)
    assert (default[:, 0] - record['classifier_out'][:, 0]).abs().max() > 0.05
