"""Conv encodings on the token grid: PEG (CPVT) and LePE (CSWin)."""

import pytest
import timm
import torch

import vispe
from vispe.positions import Positions, grid_coords, grid_positions

H, W, P, D = 4, 5, 2, 8  # grid, prefix tokens, width (2 heads of 4)


def peg():
    enc = vispe.build_encoding('peg', dim=D)
    torch.nn.init.normal_(enc.proj.weight)  # random, non-zero taps everywhere
    return enc


def lepe():
    enc = vispe.build_encoding('lepe', dim=D, num_heads=2)
    torch.nn.init.normal_(enc.conv.weight)
    return enc


def neighbourhood(r, c):
    """Flat indices of the 3x3 neighbourhood of (r, c), clipped at the borders."""
    return {i * W + j for i in range(max(r - 1, 0), min(r + 2, H)) for j in range(max(c - 1, 0), min(c + 2, W))}


def changed_tokens(fn, x, token_dim, r, c):
    """Patch tokens whose output changes when the input of patch (r, c) is perturbed."""
    x2 = x.clone()
    x2.select(token_dim, P + r * W + c).add_(1.0)
    diff = (fn(x2) - fn(x)).abs().movedim(token_dim, 0).flatten(1).amax(1)
    assert diff[:P].max() == 0  # prefix tokens never see the patches
    return set(torch.nonzero(diff[P:] > 1e-6).flatten().tolist())


@pytest.mark.parametrize('rc', [(0, 0), (1, 2), (3, 4), (2, 0)])
def test_peg_output_depends_only_on_3x3_neighbourhood(rc):
    enc, pos = peg(), grid_positions(H, W, num_prefix=P)
    x = torch.randn(2, P + H * W, D)
    assert changed_tokens(lambda t: enc.after_block(t, pos), x, 1, *rc) == neighbourhood(*rc)


@pytest.mark.parametrize('rc', [(0, 0), (1, 2), (3, 4), (2, 0)])
def test_lepe_value_term_depends_only_on_3x3_neighbourhood(rc):
    enc, pos = lepe(), grid_positions(H, W, num_prefix=P)
    v = torch.randn(2, 2, P + H * W, 4)
    assert changed_tokens(lambda t: enc.value_term(t, pos), v, 2, *rc) == neighbourhood(*rc)


def border_and_centre(grid_out):
    """(h, w, C) outputs for a constant input -> (max border-vs-centre difference, max spread in the centre)."""
    centre = grid_out[1:-1, 1:-1]
    spread = (centre - centre[0, 0]).abs().max()
    border = torch.cat([grid_out[0], grid_out[-1], grid_out[:, 0], grid_out[:, -1]])
    return (border - centre[0, 0]).abs().amin(-1).min(), spread


def test_zero_padding_makes_peg_position_aware():
    enc, pos = peg(), grid_positions(H, W, num_prefix=P)
    x = torch.ones(1, P + H * W, D)
    out = enc.after_block(x, pos)
    torch.testing.assert_close(out[:, :P], x[:, :P])  # prefix tokens pass through unchanged
    border_gap, centre_spread = border_and_centre(out[0, P:].reshape(H, W, D))
    assert centre_spread < 1e-5 and border_gap > 1e-3


def test_zero_padding_makes_lepe_position_aware():
    enc, pos = lepe(), grid_positions(H, W, num_prefix=P)
    term = enc.value_term(torch.ones(1, 2, P + H * W, 4), pos)
    assert term.shape == (1, 2, P + H * W, 4)
    assert term[:, :, :P].abs().max() == 0  # prefix tokens get no term
    border_gap, centre_spread = border_and_centre(term[0, :, P:].permute(1, 0, 2).reshape(H, W, 8))
    assert centre_spread < 1e-5 and border_gap > 1e-3


def test_lepe_without_prefix_and_convolves_each_channel_alone():
    enc, pos = lepe(), grid_positions(H, W)
    v = torch.zeros(1, 2, H * W, 4)
    v[0, 1, :, 2] = torch.randn(H * W)  # only head 1, channel 2 is non-zero
    term = enc.value_term(v, pos) - enc.conv.bias.view(2, 1, 4)  # remove the constant bias
    mask = torch.zeros_like(term, dtype=torch.bool)
    mask[0, 1, :, 2] = True
    assert term[~mask].abs().max() < 1e-6 and term[mask].abs().max() > 1e-3


def test_missing_grid_is_a_clear_error():
    pos = Positions(torch.randn(9, 2), grid=None, num_prefix=1)
    with pytest.raises(ValueError, match='peg needs tokens on a grid'):
        peg().after_block(torch.randn(1, 10, D), pos)
    with pytest.raises(ValueError, match='lepe needs tokens on a grid'):
        lepe().value_term(torch.randn(1, 2, 10, 4), pos)
    with pytest.raises(ValueError, match='does not hold'):
        peg().after_block(torch.randn(1, 10, D), Positions(grid_coords(3, 3), grid=(2, 4), num_prefix=1))


@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(kernel_size=4), 'odd kernel_size'),
        (dict(kernel_size=0), 'odd kernel_size'),
        (dict(blocks=-1), 'non-negative'),
        (dict(blocks=(0, 1.5)), 'non-negative'),
        (dict(blocks=()), 'non-empty'),
        (dict(blocks=2, depth=2), 'past the last'),
    ],
)
def test_peg_validates_its_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vispe.build_encoding({'type': 'peg', **kwargs}, dim=D)


def test_peg_blocks_is_a_tuple_and_follows_those_blocks():
    assert vispe.build_encoding({'type': 'peg', 'blocks': 1}, dim=D).blocks == (1,)
    assert vispe.build_encoding({'type': 'peg', 'blocks': [2, 0]}, dim=D).blocks == (0, 2)
    with pytest.raises(ValueError, match='odd kernel_size'):
        vispe.build_encoding({'type': 'lepe', 'kernel_size': 2}, dim=D, num_heads=2)
    model = vispe.create_model('vit_tiny_patch16_224', encoding={'type': 'peg', 'blocks': 1}, **TINY)
    seen = []
    orig = model.pe['peg'].after_block
    model.pe['peg'].after_block = lambda x, pos: seen.append(x.shape) or orig(x, pos)
    model(torch.randn(1, 3, 32, 32))
    assert seen == [(1, 17, 64)]  # once, after block 1 of 2, on cls + 4x4 patch tokens


TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5)


@pytest.mark.parametrize('encoding', ['peg', 'lepe', ['rope_mixed', 'peg'], ['lepe', 'ape_learned']])
def test_models_train_at_two_resolutions(encoding):
    # average pooling: with cls pooling the last block's lepe cannot reach the output (next test)
    model = vispe.create_model('vit_tiny_patch16_224', encoding=encoding, global_pool='avg', **TINY)
    for size in [(32, 32), (40, 24)]:
        model.zero_grad()
        out = model(torch.randn(2, 3, *size))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.square().sum().backward()
        grads = [p.grad for n, p in model.named_parameters() if '.pe.' in f'.{n}']
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_last_block_lepe_is_dead_under_cls_pooling():
    """LePE adds nothing to prefix tokens, and the last block's patch outputs are discarded by cls pooling."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding='lepe', **TINY)
    model(torch.randn(2, 3, 32, 32)).square().sum().backward()
    assert model.blocks[0].attn.pe['lepe'].conv.weight.grad.abs().sum() > 0
    assert model.blocks[-1].attn.pe['lepe'].conv.weight.grad.abs().sum() == 0


def test_apply_encoding_keeps_the_other_weights():
    timm_model = timm.create_model('vit_tiny_patch16_224', **TINY)
    before = {k: v.clone() for k, v in timm_model.state_dict().items() if k != 'pos_embed'}
    model = vispe.apply_encoding(timm_model, 'peg')
    after = model.state_dict()
    assert set(after) - set(before) == {'pe.peg.proj.weight', 'pe.peg.proj.bias'}
    for k, v in before.items():
        if k != 'cls_token':  # the cls token absorbs its own pos_embed entry
            assert torch.equal(after[k], v), k


@pytest.mark.parametrize('name', ['vit_tiny_patch16_peg_224', 'vit_small_patch16_lepe_224'])
def test_timm_knows_the_names(name):
    assert timm.is_model(name)
    enc = name.split('_')[3]
    model = timm.create_model(name, **TINY)
    assert model.encoding_names == [enc]
