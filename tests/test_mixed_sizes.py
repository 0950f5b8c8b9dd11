"""Batches of images of different sizes and aspect ratios (vispe.layout, vispe.backbones.mixed_sizes), as
properties for every registered 2D encoding: an image inside a mixed batch gives what it gives alone, padded or
packed, and padding tokens never change a real one."""

import pytest
import torch

import vispe
from vispe.backbones.mixed_sizes import mixed_tokens
from vispe.layout import make_layout

ENCODINGS = vispe.list_encodings(ndim=2)  # every image encoding without cameras, new ones included
#: patch 4: grids 8x8, 4x12, 6x4, 2x2 and 5x3 (one image size twice, so images of one size share a conv / table)
SIZES = [(32, 32), (16, 48), (24, 16), (8, 8), (20, 12), (16, 48)]
#: options that make each encoding do work at init (iRPE's tables start at zero, and on V it has its own path)
OPTIONS = {'irpe': dict(type='irpe', on='qkv'), 'peg': dict(type='peg', blocks=(0, 1))}


def model_for(encoding, mode='pad', **overrides):
    """A small model of ``encoding`` (a name, with OPTIONS, or a spec dict) with its encoding's parameters off init."""
    kwargs = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=5)
    model = vispe.create_model(
        'vit_tiny_patch16_224',
        encoding=OPTIONS.get(encoding, encoding) if isinstance(encoding, str) else encoding,
        mixed_sizes=mode,
        **{**kwargs, **overrides},
    )
    with torch.no_grad():  # zero-initialised tables (iRPE, HARoPE's generators) would hide a wrong lookup
        for name, p in model.named_parameters():
            if '.pe.' in name or name.startswith('pe.'):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def images(sizes=SIZES):
    return [torch.randn(3, h, w) for h, w in sizes]


@pytest.mark.parametrize('mode', ['pad', 'pack'])
@pytest.mark.parametrize('encoding', ENCODINGS)
def test_an_image_in_a_mixed_batch_gives_what_it_gives_alone(encoding, mode):
    model = model_for(encoding, mode)
    batch = images()
    with torch.no_grad():
        mixed = model(batch)
        alone = torch.cat([model(x[None]) for x in batch])
        features = model.forward_features(batch)
    assert mixed.shape == (len(batch), 5)
    torch.testing.assert_close(mixed, alone, atol=2e-5, rtol=1e-4)
    assert [f.shape for f in features] == [(1 + (h // 4) * (w // 4), 32) for h, w in SIZES]


@pytest.mark.parametrize('block_size', [2, 8])
@pytest.mark.parametrize('encoding', ['comrope_ap', 'comrope_ld', 'liere'])
def test_comrope_blocks_of_every_size_rotate_each_image_by_its_own_grid(encoding, block_size):
    # a mixed batch computes ComRoPE's (and LieRE's) rotations once per grid cell and gathers them per token (block
    # size 4, LieRE's 8, are in the registry-wide tests above; 2 and 8 take their own branches)
    model = model_for(dict(type=encoding, block_size=block_size), 'pack')
    batch = images()
    with torch.no_grad():
        torch.testing.assert_close(model(batch), torch.cat([model(x[None]) for x in batch]), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('mode', ['pad', 'pack'])
def test_comrope_prefix_position_in_a_mixed_batch(mode):
    # the per-cell rotation table's last row, shared by prefix and padding tokens, is the prefix position's
    model = model_for(dict(type='comrope_ld', prefix_position=0.5), mode)
    batch = images()
    with torch.no_grad():
        torch.testing.assert_close(model(batch), torch.cat([model(x[None]) for x in batch]), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_padding_tokens_never_change_real_ones(encoding):
    model = model_for(encoding, 'pack', pack_tokens=80)
    batch = images()
    with torch.no_grad():
        x, pos = mixed_tokens(model, batch)
        layout = pos.layout
        pad = layout.segments() < 0  # (B, T)
        assert pad.any(), 'the layout should have padding for this test to mean something'

        def run(x):
            mask = layout.attn_mask()
            for i in range(len(model.blocks)):
                x = model.run_block(i, x, pos, mask)
            return layout.unpack(model.norm(x))

        clean = run(x)
        noisy = run(torch.where(pad[..., None], torch.randn_like(x) * 100, x))
    for a, b in zip(clean, noisy):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('strategy', ['interpolate', 'ntk', 'yarn'])
@pytest.mark.parametrize('encoding', ['rope_axial', 'rope_mixed', 'harope'])
def test_rotary_strategies_scale_each_image_by_its_own_grid(encoding, strategy):
    model = model_for(encoding)
    for attn in model.attentions():
        for enc in attn.pe.values():
            enc.strategy = strategy
    batch = images([(32, 32), (64, 32), (48, 96), (96, 96)])  # scales 1, (2, 1), (1.5, 3), (3, 3)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), torch.cat([model(x[None]) for x in batch]), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('pool', ['token', 'avg', 'map', 'avgmax'])
def test_pooling_and_prefix_tokens_per_image(pool):
    """Register tokens and average pooling: each image's own prefix tokens and patches, packed several per row."""
    model = model_for('rope_mixed', 'pack', reg_tokens=2, global_pool=pool, class_token=pool == 'token')
    batch = images()
    with torch.no_grad():
        torch.testing.assert_close(model(batch), torch.cat([model(x[None]) for x in batch]), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_gradients_of_a_mixed_batch_match_those_of_the_images_alone(encoding):
    # the encodings' own parameters included: rope_mixed's frequencies (a hand-written backward in a mixed batch),
    # PEG's and LePE's convs (one gather and one scatter over every image size)
    # each forward pass from the same seed: rope_dinov3 draws one coordinate augmentation per forward pass
    model = model_for(encoding, 'pack').train()
    batch = images()

    def loss(x):
        torch.manual_seed(0)
        return model(x).square().sum()

    loss(batch).backward()
    mixed = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    sum(loss(x[None]) for x in batch).backward()
    encoding_grads = []
    for name, p in model.named_parameters():
        if p.grad is None:
            assert name not in mixed, name
            continue
        torch.testing.assert_close(mixed[name], p.grad, atol=1e-4, rtol=1e-3, msg=name)
        if '.pe.' in name or name.startswith('pe.'):
            encoding_grads.append(p.grad.abs().sum().item())
    assert not encoding_grads or max(encoding_grads) > 0  # the encoding's own parameters were compared, not zeros


def test_one_matmul_embeds_the_patches_of_every_image_as_the_conv_does():
    from vispe.backbones.mixed_sizes import _linear_patches, embed_patches

    model = model_for('rope_axial')
    batch = images()
    assert _linear_patches(model.patch_embed)
    with torch.no_grad():
        per_image = torch.cat([model.patch_embed(x[None]).flatten(0, 2) for x in batch])  # timm's conv, alone
        torch.testing.assert_close(embed_patches(model, batch), per_image, atol=1e-5, rtol=1e-5)


def test_a_patch_embedding_that_pads_runs_per_image_size():
    """dynamic_img_pad: sizes that are no multiple of the patch, each image padded by timm's PatchEmbed itself."""
    from vispe.backbones.mixed_sizes import _linear_patches

    model = model_for('rope_mixed', 'pack', dynamic_img_pad=True)
    assert not _linear_patches(model.patch_embed)
    batch = images([(30, 30), (18, 45), (8, 8), (18, 45)])
    with torch.no_grad():
        torch.testing.assert_close(model(batch), torch.cat([model(x[None]) for x in batch]), atol=2e-5, rtol=1e-4)
        assert [f.shape[0] for f in model.forward_features(batch)] == [1 + 64, 1 + 5 * 12, 1 + 4, 1 + 5 * 12]


def test_a_list_of_one_size_runs_as_the_batch():
    model = model_for('rope_axial')
    batch = images([(24, 32)] * 3)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(torch.stack(batch)))


def test_rpe2d_draws_each_image_positions_from_its_own_grid():
    model = model_for('rope_axial', 'pack', position_sampler=dict(type='rpe2d', max_grid=(24, 24))).train()
    batch = images()
    _, pos = mixed_tokens(model, batch)
    layout = pos.layout
    for i, (h, w) in enumerate(layout.grids):
        row, cols = layout.patch_index(i)
        drawn = pos.coords[row, cols].reshape(h, w, 2)
        rows, columns = drawn[:, 0, 0], drawn[0, :, 1]
        assert (drawn[..., 0] == rows[:, None]).all() and (drawn[..., 1] == columns[None, :]).all()
        assert (rows.diff() > 0).all() and (columns.diff() > 0).all()  # sorted, distinct
        assert rows.max() < 24 and columns.max() < 24
    assert pos.key is None and pos.extent == (24, 24)
    assert pos.num_prefix == 0  # each image's cls token sits in its segment, marked by patch_mask


def test_packing_fills_rows_first_fit_by_decreasing_length():
    layout = make_layout([(4, 4), (2, 2), (3, 3), (4, 2), (1, 1)], prefix_per_image=1, mode='pack', capacity=20)
    # each image takes its cls token and its patches, in rows of 20 + 1 tokens; by decreasing size:
    # 17 -> row 0; 10 -> row 1; 9 -> row 1 (19); 5 -> row 2 (no room in 0 or 1); 2 -> row 0 (19)
    assert layout.rows == (0, 2, 1, 1, 0) and layout.num_rows == 3
    assert layout.starts == (0, 0, 0, 10, 17) and layout.slots == (0, 0, 0, 1, 1)
    assert layout.length == 19 and layout.slots_per_row == 2
    seg = layout.segments()
    assert seg.shape == (3, 19)
    assert seg[0].tolist() == [0] * 17 + [1] * 2  # two images, each its cls token then its patches
    assert (seg[2, 5:] == -1).all()  # row 2's tail is padding
    patch = layout.patch_mask()
    assert patch[0, [0, 17]].tolist() == [False, False] and patch[0, [1, 16, 18]].all()  # cls tokens are no patches
    assert layout.patch_index(4) == (0, slice(18, 19)) and layout.prefix_index(4) == (0, slice(17, 18))
    assert layout.table_index()[0, [0, 17]].tolist() == [sum((16, 4, 9, 8, 1))] * 2  # no position: the last row
    mask = layout.attn_mask()[:, 0]
    assert mask.any(-1).all(), 'every query attends to at least one key (no all-masked row)'
    with pytest.raises(ValueError, match='pack_tokens=10 is smaller than an image of 16'):
        make_layout([(4, 4)], 1, 'pack', capacity=10)


def test_a_full_grid_image_with_its_cls_token_fills_a_row_of_the_fixed_length():
    """Packed rows hold P + pack_tokens tokens whatever number of images they hold: the fixed batch's length."""
    layout = make_layout([(8, 8), (4, 4), (4, 4), (4, 4), (3, 3)], prefix_per_image=1, mode='pack', capacity=64)
    assert layout.length == 65 and layout.num_rows == 2 and layout.rows == (0, 1, 1, 1, 1)
    assert layout.real_tokens() + 5 == 64 + 3 * 16 + 9 + 5  # every token but the padding: patches and cls tokens


def test_bad_mixed_inputs_say_what_to_fix():
    model = model_for('rope_axial')
    with pytest.raises(ValueError, match='one \\(C, H, W\\) tensor per image'):
        model([torch.randn(1, 3, 32, 32)])
    with pytest.raises(ValueError, match='not divisible by the patch size'):
        model([torch.randn(3, 32, 32), torch.randn(3, 30, 32)])
    with pytest.raises(ValueError, match='attends within each image'):
        model.forward_features([torch.randn(3, 32, 32)], attn_mask=torch.ones(1, 1, 65, 65, dtype=torch.bool))
    with pytest.raises(ValueError, match="mixed_sizes must be one of \\['pad', 'pack'\\]"):
        model_for('rope_axial', mode='packed')
    with pytest.raises(ValueError, match='forward_intermediates takes a \\(B, C, H, W\\) batch'):
        model.forward_intermediates([torch.randn(3, 32, 32)])


def test_a_mixed_resolution_config_trains_resumes_and_sweeps(tmp_path):
    """The random-aspect config (lists of images of mixed sizes, padded) through vispe.engine.train: two epochs,
    resumed for a third (continuing, not restarting), then swept over resolutions like any checkpoint."""
    from vispe.engine.checkpoint import load_checkpoint
    from vispe.engine.train import train
    from vispe.evaluation.trained_model import parse_resolution
    from vispe.sweeps.resolution import evaluate_resolution

    config = 'vit/vit_tiny_shapes2d_mixedres_aspect_position.py'
    options = {
        'model.backbone.encoding': 'peg',
        'model.backbone.mixed_sizes': 'pack',
        'model.backbone.embed_dim': 32,
        'model.backbone.depth': 2,
        'train_dataloader.dataset.num_samples': 64,
        'train_dataloader.batch_size': 16,
        'val_dataloader.dataset.num_samples': 32,
        'test_dataloader.dataset.num_samples': 32,
        'train_cfg.max_epochs': 2,
    }
    work = tmp_path / 'run'
    train(config, str(work), options)
    assert (work / 'epoch_2.pth').is_file()
    cfg = train(config, str(work), {**options, 'train_cfg.max_epochs': 3}, resume=True)
    state = load_checkpoint(str(work / 'epoch_3.pth'))
    assert state['meta']['epoch'] == 3 and state['meta']['iter'] == 12  # 4 iterations an epoch, resumed at 8
    results = evaluate_resolution(
        cfg, str(work / 'epoch_3.pth'), [parse_resolution('16'), parse_resolution('48')], out_dir=str(tmp_path / 'ev')
    )
    rows = results['results']
    assert {str(r['resolution']) for r in rows} == {'16', '48'} and not results['failed']
    assert all(0.0 <= r['value'] <= 100.0 for r in rows)
