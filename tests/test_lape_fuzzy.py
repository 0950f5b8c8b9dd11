"""LaPE (``lape=True`` on ape_learned, ape_sincos, lff: the table enters every block's attention input through a
LayerNorm of its own) and ViTAR's fuzzy positional encoding (the ``fuzzy`` position sampler and ape_learned's
``grid_sample`` strategy)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_VIT

import vispe
from vispe.backbones import MultiViewTransformer
from vispe.backbones.dit import DiT, modulate
from vispe.backbones.vit import VisionTransformerPE
from vispe.encodings.absolute import sample_table
from vispe.encodings.build import build_encoding
from vispe.positions import build_position_sampler, grid_positions

LAPE = ('ape_learned', 'ape_sincos', 'lff')


def vit(encoding, seed: int = 0, **overrides) -> VisionTransformerPE:
    torch.manual_seed(seed)
    return VisionTransformerPE(encoding=encoding, **{**TINY_VIT, **overrides}).eval()


def capture_block_inputs(model):
    """Forward pre-hooks recording each block's input x and its attention's input: lists filled by a forward."""
    blocks, attns, handles = [], [], []
    for blk in model.blocks:
        handles.append(blk.register_forward_pre_hook(lambda m, a, kw=None: blocks.append(a[0]), with_kwargs=False))
        handles.append(blk.attn.register_forward_pre_hook(lambda m, a: attns.append(a[0])))
    return blocks, attns, handles


# --- LaPE ---
@pytest.mark.parametrize('name', LAPE)
def test_lape_with_zeroed_norms_is_the_model_without_positions(name):
    """With every LN'_l's weight and bias 0 the positions add nothing anywhere: the output equals the same weights
    with no encoding at all (so the tokens themselves never carry the table)."""
    plain = vit(None)
    lape = vit(dict(type=name, lape=True))
    missing, unexpected = lape.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(f'pe.{name}.') for k in missing)
    with torch.no_grad():
        for norm in lape.pe[name].lape_norms:
            norm.weight.zero_()
            norm.bias.zero_()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(lape(x), plain(x), rtol=0, atol=0)


@pytest.mark.parametrize('name', LAPE)
def test_lape_adds_each_blocks_own_norm_of_the_table_at_its_attention_input(name):
    """In every block l, the attention input is norm1(x_l) + LN'_l(P) at the patch tokens and norm1(x_l) at the cls
    token, x_l the block's input; block 0's input is the tokens without P (the no-encoding model's)."""
    lape = vit(dict(type=name, lape=True))
    enc = lape.pe[name]
    with torch.no_grad():  # distinct per-layer norms, so that a mix-up of layers shows
        for norm in enc.lape_norms:
            norm.weight.normal_()
            norm.bias.normal_()
    plain = vit(None)
    plain.load_state_dict(lape.state_dict(), strict=False)
    x = torch.randn(2, 3, 32, 32)
    blocks, attns, handles = capture_block_inputs(lape)
    lape(x)
    plain_blocks, _, _ = capture_block_inputs(plain)
    plain(x)
    torch.testing.assert_close(blocks[0], plain_blocks[0], rtol=0, atol=0)
    pos = grid_positions(4, 4, lape.num_prefix_tokens)
    table = enc.position_table(pos, torch.float32)
    P = lape.num_prefix_tokens
    assert P == 1 and len(blocks) == len(attns) == TINY_VIT['depth']
    for i, (blk, x_i, attn_in) in enumerate(zip(lape.blocks, blocks, attns)):
        expected = blk.norm1(x_i)
        torch.testing.assert_close(attn_in[:, :P], expected[:, :P])
        torch.testing.assert_close(attn_in[:, P:], expected[:, P:] + enc.lape_norms[i](table))
    for h in handles:
        h.remove()


def test_lape_progressive_chains_the_norms_through_the_blocks():
    """``lape_progressive=True`` (the authors' code): block l's attention input adds LN'_l(...LN'_0(P)) at the patch
    tokens, the table through every norm up to its own."""
    model = vit(dict(type='ape_learned', lape=True, lape_progressive=True))
    enc = model.pe.ape_learned
    with torch.no_grad():
        for norm in enc.lape_norms:
            norm.weight.normal_()
            norm.bias.normal_()
    blocks, attns, handles = capture_block_inputs(model)
    model(torch.randn(2, 3, 32, 32))
    chained = enc.position_table(grid_positions(4, 4, 1), torch.float32)
    for i, (blk, x_i, attn_in) in enumerate(zip(model.blocks, blocks, attns)):
        chained = enc.lape_norms[i](chained)
        torch.testing.assert_close(attn_in[:, 1:], blk.norm1(x_i)[:, 1:] + chained)
    assert len(attns) == TINY_VIT['depth'] > 1
    for h in handles:
        h.remove()


def test_lape_changes_the_output_and_trains_its_norms_without_decay():
    """Same weights and table, lape on vs off: different outputs; the loss reaches the table and every LN'_l; the
    LN' parameters are 1-D, so timm's optimizer puts them in the no-decay group, beside the declared table."""
    from timm.optim import create_optimizer_v2

    plain = vit('ape_learned')
    lape = vit(dict(type='ape_learned', lape=True))
    lape.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 3, 32, 32)
    assert not torch.allclose(lape(x), plain(x))
    lape.train()
    lape(x).square().mean().backward()
    enc = lape.pe.ape_learned
    assert enc.pos_embed.grad is not None and enc.pos_embed.grad.abs().sum() > 0
    for norm in enc.lape_norms:
        assert norm.weight.grad.abs().sum() > 0 and norm.bias.grad.abs().sum() > 0
    assert 'pe.ape_learned.pos_embed' in lape.no_weight_decay()
    groups = create_optimizer_v2(lape, 'adamw', lr=1e-3, weight_decay=0.05).param_groups
    no_decay = {id(p) for g in groups if g['weight_decay'] == 0 for p in g['params']}
    for norm in enc.lape_norms:
        assert id(norm.weight) in no_decay and id(norm.bias) in no_decay


def test_lape_through_timm_names_and_conversion():
    """vispe's timm name and a converted timm ViT take the option: one LN' per block, the timm table adopted."""
    for base in ('vit_tiny_patch16_ape_learned_224', 'vit_tiny_patch16_224'):
        model = vispe.create_model(base, encoding=dict(type='ape_learned', lape=True), **TINY_VIT).eval()
        enc = model.pe.ape_learned
        assert enc.lape and len(enc.lape_norms) == TINY_VIT['depth']
        assert enc.active_hooks() == {'attn_input'}
        assert model(torch.randn(1, 3, 48, 32)).shape == (1, TINY_VIT['num_classes'])  # another grid: resampled


def test_lape_in_dit_enters_after_the_modulation():
    """DiT with ape_sincos and lape: each block's attention input is modulate(norm1(x_l)) + LN'_l(sincos table); the
    loss reaches the norms."""
    torch.manual_seed(0)
    model = DiT(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=4,
                encoding=dict(type='ape_sincos', lape=True))  # fmt: skip
    with torch.no_grad():  # leave adaLN-Zero's zero init, so that every part of the block is live
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    enc = model.pe.ape_sincos
    x, t, y = torch.randn(2, 3, 16, 16), torch.rand(2) * 1000, torch.tensor([0, 3])
    blocks, attns, handles = capture_block_inputs(model)
    model(x, t, y).square().mean().backward()
    c = model.condition(t, y, None, 2)
    table = enc.position_table(grid_positions(4, 4), torch.float32)
    for i, (blk, x_i, attn_in) in enumerate(zip(model.blocks, blocks, attns)):
        shift, scale = blk.adaLN_modulation(c)[:, None].chunk(6, -1)[:2]
        torch.testing.assert_close(attn_in, modulate(blk.norm1(x_i), shift, scale) + enc.lape_norms[i](table))
        assert enc.lape_norms[i].weight.grad.abs().sum() > 0
    for h in handles:
        h.remove()


def test_lape_refused_where_blocks_do_not_call_the_hook_and_needs_depth():
    with pytest.raises(ValueError, match=r'attn_input.*lape=True'):
        MultiViewTransformer(encoding=dict(type='ape_learned', lape=True), img_size=16, patch_size=4, embed_dim=32,
                             depth=2, num_heads=2)  # fmt: skip
    MultiViewTransformer(encoding='ape_learned', img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2)
    with pytest.raises(ValueError, match='needs depth'):
        build_encoding(dict(type='ape_sincos', lape=True), dim=32)
    with pytest.raises(ValueError, match='lape_progressive=True chains the LaPE norms; set lape=True'):
        build_encoding(dict(type='ape_learned', lape_progressive=True), dim=32, depth=2)


def test_lape_with_gradient_checkpointing_matches():
    model = vit(dict(type='ape_learned', lape=True)).train()
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.set_grad_checkpointing(True)
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(p.grad, g)


# --- fuzzy positions, grid_sample ---
def test_fuzzy_sampler_jitters_within_the_cell_per_call_and_sample():
    sampler = build_position_sampler(dict(type='fuzzy'), grid=(4, 5))
    pos = grid_positions(4, 5, num_prefix=1)
    a, b = sampler(pos, 3), sampler(pos, 3)
    assert a.coords.shape == (3, 20, 2) and a.key is None and a.grid == (4, 5) and a.num_prefix == 1
    for s in (a, b):
        offset = s.coords - pos.coords
        assert offset.abs().max() <= 0.5 and offset.abs().max() > 0.3
    assert not torch.equal(a.coords, b.coords)  # new draws per call
    assert not torch.equal(a.coords[0], a.coords[1])  # and per sample
    with pytest.raises(ValueError, match='radius'):
        build_position_sampler(dict(type='fuzzy', radius=0.7))


def test_sample_table_is_exact_at_integer_points_and_is_grid_sample_elsewhere():
    torch.manual_seed(0)
    h, w, D = 5, 7, 6
    table = torch.randn(1, h * w, D)
    cells = grid_positions(h, w).coords
    assert torch.equal(sample_table(table, (h, w), cells)[None], table)  # to the bit
    u = torch.rand(2, 30, 2) * torch.tensor([h + 1.0, w + 1.0]) - 1.0  # some outside: clamped to the border
    image = table.reshape(1, h, w, D).permute(0, 3, 1, 2).expand(2, -1, -1, -1)
    norm = torch.stack([u[..., 1] / (w - 1), u[..., 0] / (h - 1)], dim=-1) * 2 - 1  # grid_sample's (x, y) in [-1, 1]
    reference = F.grid_sample(image, norm[:, None], mode='bilinear', align_corners=True, padding_mode='border')
    torch.testing.assert_close(sample_table(table, (h, w), u), reference[:, :, 0].transpose(1, 2))


def test_grid_sample_strategy_equals_plain_ape_learned_at_the_training_grid_and_bilinear_upsampling_elsewhere():
    model = vit('ape_learned')
    x = torch.randn(2, 3, 32, 32)
    plain = model(x)
    enc = model.pe.ape_learned
    enc.strategy = 'grid_sample'
    assert torch.equal(model(x), plain)  # eval, the training grid: exactly the plain table
    # another grid: the table read at the cell centres, i.e. bilinear upsampling (align_corners=False, no antialias)
    table = enc.position_table(grid_positions(6, 8), torch.float32)
    image = enc.pos_embed.reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
    reference = F.interpolate(image, size=(6, 8), mode='bilinear', align_corners=False)
    torch.testing.assert_close(table, reference.flatten(2).transpose(1, 2))
    # the grid's own coordinates through the sampler path (no fast path) give the table too
    shifted = grid_positions(4, 4)
    shifted.key = None
    assert torch.equal(enc.position_table(shifted, torch.float32)[0], enc.pos_embed[0])


def test_fuzzy_training_reads_the_table_between_entries_and_trains_it():
    model = vit(dict(type='ape_learned', strategy='grid_sample'), position_sampler=dict(type='fuzzy')).train()
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    b = model(x)
    assert not torch.allclose(a, b)  # the positions are drawn anew
    a.square().mean().backward()
    assert model.pe.ape_learned.pos_embed.grad.abs().sum() > 0
    model.eval()
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)  # evaluation: the exact grid
    plain = vit('ape_learned')
    plain.load_state_dict(model.state_dict())
    assert torch.equal(model(x), plain(x))


def test_fuzzy_and_grid_sample_in_a_mixed_size_batch():
    """A list of images of two sizes: each image's output equals its own forward (eval), and training with fuzzy
    runs and reaches the table."""
    model = vit(dict(type='ape_learned', strategy='grid_sample', lape=True))
    images = [torch.randn(3, 32, 32), torch.randn(3, 48, 32)]
    feats = model.forward_features(images)
    for image, f in zip(images, feats):
        torch.testing.assert_close(f, model.forward_features(image[None])[0], atol=1e-5, rtol=1e-5)
    model.position_sampler = build_position_sampler(dict(type='fuzzy'))
    model.train()
    sum(f.sum() for f in model.forward_features(images)).backward()
    assert model.pe.ape_learned.pos_embed.grad.abs().sum() > 0


def test_grid_sample_is_swept_only_when_asked_for_or_configured():
    """Adding grid_sample to ape_learned must not change what a default sweep of an ape_learned checkpoint measures
    (the leaderboard's archived results would no longer cover the sweep, and its runs would train again)."""
    from vispe.evaluation.trained_model import available_strategies, check_strategies

    plain = vit('ape_learned')
    assert available_strategies(plain) == ['bicubic', 'bilinear', 'nearest']
    assert check_strategies(plain, None) == ['bicubic', 'bilinear', 'nearest']
    assert check_strategies(plain, ['grid_sample']) == ['grid_sample']  # named: taken
    assert 'grid_sample' in available_strategies(plain, opt_in=True)
    configured = vit(dict(type='ape_learned', strategy='grid_sample'))
    assert 'grid_sample' in available_strategies(configured)
