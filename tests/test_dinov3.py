"""rope_dinov3: DINOv3's rotary positions against timm's port (``RotaryEmbeddingDinoV3``, which matches the authors'
code numerically), and its invariants as properties: relative under shifts, a resolution change as interpolation,
the augmentation drawn once per forward pass and never at evaluation."""

from __future__ import annotations

import pytest
import torch
from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3, _apply_coord_augs, _build_grid, apply_rot_embed_cat

import vispe
import vispe.encodings.dinov3 as dinov3
from vispe.backbones.timm_interop.eva import rotate_half_order
from vispe.encodings.dinov3 import RoPEDinoV3
from vispe.positions import Positions, grid_positions

DIM, HEADS = 128, 2
HEAD_DIM = DIM // HEADS


@pytest.mark.parametrize('shape', [(4, 6), (7, 3), (14, 14)])
@pytest.mark.parametrize(
    'options',
    [
        dict(),
        dict(normalize='min'),
        dict(normalize='max'),
        dict(min_period=0.5, max_period=40.0),
    ],
    ids=['base', 'min', 'max', 'periods'],
)
def test_rotation_equals_timms_dinov3_rope(shape, options):
    timm_options = dict(options)
    if 'normalize' in timm_options:
        timm_options['normalize_coords'] = timm_options.pop('normalize')
    reference = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=100.0, feat_shape=list(shape), **timm_options)
    x = torch.randn(2, HEADS, 3 + shape[0] * shape[1], HEAD_DIM)
    expected = x.clone()
    expected[:, :, 3:] = apply_rot_embed_cat(x[:, :, 3:], reference.get_embed(), half=True)
    order = rotate_half_order(HEAD_DIM)
    enc = RoPEDinoV3(DIM, HEADS, **options).eval()
    q, k = enc.rotate(x[..., order], x[..., order].clone(), grid_positions(*shape, num_prefix=3))
    torch.testing.assert_close(q, expected[..., order], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k, expected[..., order], atol=1e-5, rtol=1e-5)


def test_augmentation_draws_what_timms_draws_from_the_same_seed():
    grid = _build_grid([5, 7], grid_type='centered', normalize_coords='separate').flatten(0, -2)
    torch.manual_seed(3)
    expected = _apply_coord_augs(grid, 0.1, 1.3, 2.0)
    enc = RoPEDinoV3(DIM, HEADS, shift=0.1, jitter=1.3, rescale=2.0).train()
    pos = grid_positions(5, 7)
    torch.manual_seed(3)
    augmented = enc.coordinates(pos, enc.draw(pos))
    torch.testing.assert_close(augmented, expected)
    assert (augmented - grid).abs().max() > 1e-3  # the draw moved the coordinates
    torch.testing.assert_close(enc.coordinates(pos), grid)


def logits(enc: RoPEDinoV3, pos: Positions, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    rq, rk = enc.rotate(q, k, pos)
    return rq @ rk.transpose(-1, -2)


@pytest.mark.parametrize(('augmentation', 'patches_change'), [(dict(shift=0.5), False), (dict(rescale=2.0), True)])
def test_a_shift_keeps_patch_logits_and_moves_prefix_ones_jitter_and_rescale_scale_them(augmentation, patches_change):
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, HEADS, 1 + 36, HEAD_DIM).unbind(0)
    pos = grid_positions(6, 6, num_prefix=1)
    plain = logits(RoPEDinoV3(DIM, HEADS, rescale=None).eval(), pos, q, k)
    off_draws = RoPEDinoV3(DIM, HEADS, **{'rescale': None, **augmentation}).train()
    augmented = logits(off_draws, grid_positions(6, 6, num_prefix=1), q, k)
    patch = (slice(None), slice(None), slice(1, None), slice(1, None))
    prefix_patch = (slice(None), slice(None), 0, slice(1, None))
    assert (augmented[prefix_patch] - plain[prefix_patch]).abs().max() > 1e-3
    if patches_change:
        assert (augmented[patch] - plain[patch]).abs().max() > 1e-3
    else:
        torch.testing.assert_close(augmented[patch], plain[patch], atol=1e-4, rtol=1e-5)


def test_patch_logits_depend_on_coordinate_differences_only():
    """Sampled positions (a position sampler's, per sample): moving every token by the same offset changes no
    patch-patch logit; the normaliser is the range they were drawn from."""
    torch.manual_seed(0)
    coords = torch.rand(2, 20, 2) * 10
    q, k = torch.randn(2, 2, HEADS, 20, HEAD_DIM).unbind(0)
    enc = RoPEDinoV3(DIM, HEADS).eval()
    before = logits(enc, Positions(coords, grid=(4, 5), extent=(12, 12)), q, k)
    after = logits(enc, Positions(coords + torch.tensor([3.0, -2.0]), grid=(4, 5), extent=(12, 12)), q, k)
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-5)


def test_every_grid_spans_the_same_range_and_a_finer_grid_interpolates_the_coarse_one():
    enc = RoPEDinoV3(DIM, HEADS, grid_size=(4, 4)).eval()
    coarse = enc.angles(enc.coordinates(grid_positions(4, 6)))  # (24, d/2)
    fine = enc.angles(enc.coordinates(grid_positions(8, 12)))  # each coarse token split 2 x 2
    blocks = fine.reshape(4, 2, 6, 2, -1).mean(dim=(1, 3)).reshape(24, -1)
    torch.testing.assert_close(blocks, coarse, atol=1e-5, rtol=1e-5)
    for shape in [(2, 2), (4, 6), (16, 5)]:
        coords = enc.coordinates(grid_positions(*shape))
        assert coords.abs().max() < 1
        torch.testing.assert_close(coords.amax(0), -coords.amin(0))  # centred on the image


def test_extend_keeps_the_training_spacing_and_none_keeps_the_range():
    enc = RoPEDinoV3(DIM, HEADS, grid_size=(4, 4)).eval()
    for strategy, spacing, largest in [('none', 2 / 8, 7 / 8), ('extend', 2 / 4, 15 / 4 - 1)]:
        enc.strategy = strategy
        coords = enc.coordinates(grid_positions(8, 8)).reshape(8, 8, 2)
        torch.testing.assert_close(coords[1, 0, 0] - coords[0, 0, 0], torch.tensor(spacing))
        torch.testing.assert_close(coords.amax(), torch.tensor(largest))
    enc.strategy = 'extend'
    at_training_grid = enc.coordinates(grid_positions(4, 4))
    enc.strategy = 'none'
    torch.testing.assert_close(enc.coordinates(grid_positions(4, 4)), at_training_grid)


def test_the_augmentation_is_drawn_once_per_forward_pass_and_never_at_evaluation(monkeypatch):
    calls = []
    draw = dinov3.coordinate_augmentation

    def counted(*args):
        calls.append(args)
        return draw(*args)

    monkeypatch.setattr(dinov3, 'coordinate_augmentation', counted)
    tables = []
    table = RoPEDinoV3.table
    monkeypatch.setattr(RoPEDinoV3, 'table', lambda self, *args: tables.append(1) or table(self, *args))
    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding='rope_dinov3', img_size=32, patch_size=8, depth=3, num_classes=5
    )
    x = torch.randn(2, 3, 32, 32)
    model.train()
    model(x)
    model(x)
    assert len(calls) == 2  # one per forward pass, read by all three layers
    assert len(tables) == 2  # and the augmented table too
    model.eval()
    with torch.no_grad():
        evaluated = model(x)
        assert len(calls) == 2
        for enc in model.modules():
            if isinstance(enc, RoPEDinoV3):
                enc.shift, enc.jitter, enc.rescale = 0.3, 1.5, 3.0
        torch.testing.assert_close(model(x), evaluated, atol=0, rtol=0)


@pytest.mark.parametrize(
    ('options', 'message'),
    [
        (dict(normalize='longest'), "normalize must be one of \\['separate', 'min', 'max'\\]"),
        (dict(min_period=1.0), 'give both min_period and max_period'),
        (dict(jitter=0.5), 'jitter is a factor >= 1'),
        (dict(rescale=0.0), 'rescale is a factor >= 1'),
        (dict(shift=-1.0), 'shift is a bound >= 0'),
        (dict(base=-2.0), 'rope_dinov3 needs base > 0'),
    ],
)
def test_bad_options_are_refused_with_the_fix(options, message):
    with pytest.raises(ValueError, match=message):
        RoPEDinoV3(DIM, HEADS, **options)


def test_extend_needs_the_training_grid():
    enc = RoPEDinoV3(DIM, HEADS)
    with pytest.raises(ValueError, match="'extend' normalises by the training grid.*grid_size"):
        enc.strategy = 'extend'


def test_a_config_sets_its_options_in_one_line():
    """``--cfg-options model.backbone.encoding=rope_dinov3:rescale=none``: the leaderboard's run without
    augmentation."""
    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding='rope_dinov3:rescale=none', img_size=32, patch_size=8, depth=2
    )
    encodings = [e for e in model.modules() if isinstance(e, RoPEDinoV3)]
    assert len(encodings) == 2 and all(e.rescale is None and not e.augmented for e in encodings)
    with pytest.raises(TypeError, match='rescal.*rescale'):
        vispe.create_model('vit_tiny_patch16_224', encoding='rope_dinov3:rescal=none', img_size=32, patch_size=8)
