"""2D ALiBi: ALiBi's slopes, a bias that depends on relative positions only, prefix tokens without one, and query
chunks equal to the whole bias."""

import math

import pytest
import torch

import vispe
from vispe.attention import Attention
from vispe.encodings.alibi import alibi_slopes
from vispe.positions import Positions, grid_positions


def test_slopes_follow_alibi():
    assert alibi_slopes(8) == [2.0 ** -(h + 1) for h in range(8)]  # 2^(-8/8 h)
    six = alibi_slopes(6)  # the 4 of four heads, then every other one of eight
    assert six == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def test_bias_is_minus_slope_times_euclidean_distance_and_relative():
    enc = vispe.build_encoding('alibi2d', dim=64, num_heads=4)
    pos = grid_positions(3, 4, num_prefix=1)
    q = torch.randn(1, 4, 13, 16)
    bias = enc.logit_bias(q, q, pos)
    assert bias.shape == (1, 4, 13, 13)
    assert torch.all(bias[..., 0, :] == 0) and torch.all(bias[..., :, 0] == 0), 'the cls token has no position'
    # patch (0, 0) is token 1, patch (2, 3) token 1 + 11: distance sqrt(4 + 9)
    torch.testing.assert_close(bias[0, :, 1, 12], -torch.tensor(alibi_slopes(4)) * math.sqrt(13))
    shifted = Positions(pos.coords + torch.tensor([7.0, -3.0]), grid=pos.grid, num_prefix=1)
    torch.testing.assert_close(enc.logit_bias(q, q, shifted), bias)  # translation invariance


@pytest.mark.parametrize('sampled', [False, True])
def test_query_chunks_give_the_whole_bias(sampled):
    enc = vispe.build_encoding('alibi2d', dim=64, num_heads=4)
    pos = grid_positions(4, 5, num_prefix=2)
    if sampled:  # per-sample coordinates (rpe2d): a (B, N, N) distance per sample
        pos = Positions(torch.rand(3, 20, 2) * 8, grid=pos.grid, num_prefix=2)
    q = torch.randn(3, 4, 22, 16)
    whole = enc.logit_bias(q, q, pos)
    rows = enc.logit_bias_rows(q, q, pos)
    torch.testing.assert_close(torch.cat([rows(slice(i, i + 5)) for i in range(0, 22, 5)], dim=-2), whole)


def test_attention_with_a_small_budget_matches_the_one_shot_path():
    attn = Attention(64, 4, qkv_bias=True, encodings={'alibi2d': vispe.build_encoding('alibi2d', dim=64, num_heads=4)})
    x, pos = torch.randn(2, 1 + 30, 64), grid_positions(5, 6, num_prefix=1)
    full = attn(x, pos)
    attn.bias_budget = 2 * 4 * 31 * 4 * 3  # three query rows per chunk
    torch.testing.assert_close(attn(x, pos), full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('symmetry', ['flip_left_right', 'flip_up_down', 'transpose'])
def test_a_grid_symmetry_of_the_tokens_leaves_the_cls_output_unchanged(symmetry):
    """The bias depends on distance alone, so moving the patch tokens by a symmetry of the (square) grid moves the
    outputs with them and leaves the cls token's output as it was: alibi2d alone cannot tell left from right or rows
    from columns, which is why it is at chance on shapes2d relation (the leaderboard, docs/results/leaderboard.md).
    rope_axial, which sees signed offsets, does change."""
    torch.manual_seed(0)
    side, dim, heads = 4, 64, 4
    grid = torch.arange(side * side).reshape(side, side)
    moved = {'flip_left_right': grid.flip(1), 'flip_up_down': grid.flip(0), 'transpose': grid.T}[symmetry]
    order = torch.cat([torch.zeros(1, dtype=torch.long), 1 + moved.flatten()])  # the cls token stays first
    x, pos = torch.randn(2, 1 + side * side, dim), grid_positions(side, side, num_prefix=1)
    for name, invariant in (('alibi2d', True), ('rope_axial', False)):
        attn = Attention(dim, heads, encodings={name: vispe.build_encoding(name, dim=dim, num_heads=heads)})
        out, out_moved = attn(x, pos), attn(x[:, order], pos)
        assert torch.allclose(out_moved[:, 0], out[:, 0], atol=1e-5) == invariant, name
        if invariant:  # every token's output moves with it
            torch.testing.assert_close(out_moved, out[:, order], rtol=1e-5, atol=1e-5)


def test_the_bias_is_made_once_per_forward_pass_and_shared_by_the_layers(monkeypatch) -> None:
    """Nothing of alibi2d is learned: three layers read one bias per forward pass (one more for a second pass),
    and the model's output is what a bias made by each layer gives."""
    from vispe.encodings.alibi import ALiBi2D

    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding='alibi2d', img_size=32, patch_size=8, depth=3, num_classes=5
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    rows, made = ALiBi2D.logit_bias_rows, []
    with monkeypatch.context() as patch:  # the reference: every layer makes its own bias
        patch.setattr(
            ALiBi2D, 'logit_bias', lambda self, q, k, pos: made.append(1) or rows(self, q, k, pos)(slice(None))
        )
        per_layer = model(x)
    assert len(made) == 3
    made.clear()
    monkeypatch.setattr(ALiBi2D, 'logit_bias_rows', lambda self, *args: made.append(1) or rows(self, *args))
    torch.testing.assert_close(model(x), per_layer, atol=0, rtol=0)
    model(x)
    assert len(made) == 2


def test_positions_replaced_with_new_coordinates_do_not_read_the_old_bias() -> None:
    """``dataclasses.replace`` keeps a forward pass's random draws but starts its derived tables anew: the bias of
    coordinates twice as far apart is twice the first one, not the first one read back."""
    import dataclasses

    enc = vispe.build_encoding('alibi2d', dim=64, num_heads=4)
    pos = grid_positions(3, 4, num_prefix=1)
    q = torch.randn(1, 4, 13, 16)
    first = enc.logit_bias(q, q, pos)
    moved = dataclasses.replace(pos, coords=pos.coords * 2)
    assert moved.draws is pos.draws and not moved.tables
    torch.testing.assert_close(enc.logit_bias(q, q, moved), 2 * first)
