"""The space-time ViT and the encodings in 3D: rope_axial's sections and per-axis strategies, ape_learned's per-axis
resampling, ape_sincos in 3D, relative invariance along time and space, clips of any size and lists of them."""

import math

import pytest
import torch
from timm.layers import resample_abs_pos_embed

import vispe
from vispe.backbones import VideoTransformer
from vispe.backbones.common import PatchConv3d
from vispe.encodings.absolute import sincos_embed
from vispe.encodings.rotary_core import rotary_sections
from vispe.kernels.rotary import cos_sin_table
from vispe.positions import Positions, grid_positions, video_positions

VIDEO = vispe.list_encodings(ndim=3)
TINY = dict(num_classes=3, img_size=16, num_frames=4, patch_size=4, tubelet_size=2, embed_dim=48, depth=2, num_heads=2)


def tiny(encoding='rope_axial', **kwargs) -> VideoTransformer:
    torch.manual_seed(0)
    return VideoTransformer(encoding=encoding, **{**TINY, **kwargs}).eval()


def test_video_encodings_are_the_grid_and_coordinate_ones() -> None:
    assert {'rope_axial', 'rope_mixed', 'ape_learned', 'ape_sincos', 'rope3d', 'lff'} <= set(VIDEO)
    assert not {'peg', 'irpe', 'lepe', 'harope', 'gta'} & set(VIDEO)  # 2D grids or cameras only
    points = set(vispe.list_encodings(ndim=3, grid=False))
    assert points < set(VIDEO) and 'rope_axial' not in points and 'ape_learned' not in points


@pytest.mark.parametrize('name', VIDEO)
def test_every_video_encoding_runs_at_any_clip_size_and_trains(name: str) -> None:
    model = tiny(name).train()
    clips = torch.randn(2, 3, 4, 16, 16)
    out = model(clips)
    assert out.shape == (2, 3) and torch.isfinite(out).all()
    out.sum().backward()
    assert model.patch_embed.weight.grad is not None and model.patch_embed.weight.grad.abs().sum() > 0
    model.eval()
    for size in ((2, 16, 16), (8, 24, 16), (6, 8, 32)):  # fewer, more frames; other frame sizes
        assert torch.isfinite(model(torch.randn(1, 3, *size))).all()


def test_tokens_follow_the_conv3d_order_of_their_positions() -> None:
    """Token i of the tubelet grid is the Conv3d output at its (t, h, w) coordinates: a clip that is zero but for
    one tubelet gives a token differing from the rest exactly there."""
    model = tiny('none')
    clip = torch.zeros(1, 3, 4, 16, 16)
    clip[:, :, 2:4, 8:12, 4:8] = 1.0  # tubelet (1, 2, 1)
    tokens, pos = model.tokens(clip)
    patch = tokens[0, 1:]
    changed = (patch - patch[0]).abs().sum(-1) > 1e-6
    assert changed.sum() == 1
    assert pos.coords[changed.nonzero()[0, 0]].tolist() == [1.0, 2.0, 1.0]
    assert pos.grid == (2, 4, 4) and pos.num_prefix == 1


def test_a_list_of_clips_gives_each_clip_its_own_logits() -> None:
    model = tiny('rope_axial')
    clips = [torch.randn(3, 4, 16, 16), torch.randn(3, 8, 8, 16), torch.randn(3, 4, 16, 16)]
    out = model(clips)
    assert out.shape == (3, 3)
    for clip, row in zip(clips, out):
        torch.testing.assert_close(row, model(clip[None])[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    'clips, message',
    [
        (torch.randn(3, 4, 16, 16), r'\(B, C, T, H, W\).*clip\[None\]'),
        (torch.randn(1, 4, 3, 16, 16), r'4 channels in axis 1.*permute'),
        (torch.randn(1, 3, 5, 16, 16), r'5 frames of 16x16.*multiple of tubelet_size=2'),
        (torch.randn(1, 3, 4, 18, 16), r'height and width multiples of patch_size=4'),
        ([torch.randn(3, 4, 16)], r'a list of clips must hold \(C, T, H, W\) tensors'),
    ],
)
def test_bad_clips_get_one_line_naming_the_fix(clips, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny()(clips)


def test_bad_arguments_and_image_only_encodings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'peg' does not work on 3D positions; for video token grids choose one of"):
        tiny('peg')
    with pytest.raises(ValueError, match='tubelet_size must be an int >= 1'):
        tiny(tubelet_size=0)
    with pytest.raises(ValueError, match=r'the training clip .* is 5 frames'):
        tiny(num_frames=5)
    with pytest.raises(ValueError, match='global_pool must be one of'):
        tiny(global_pool='max')


# --- rope_axial in 3D --------------------------------------------------------------------------------------------
def test_sections_split_the_pairs_evenly_time_on_the_fewest() -> None:
    assert rotary_sections(64, 3) == (10, 11, 11) and rotary_sections(48, 3) == (8, 8, 8)
    assert rotary_sections(64, 2) == (16, 16)
    enc = vispe.build_encoding('rope_axial', dim=128, num_heads=2, ndim=3)  # head dim 64
    assert enc.sections == (10, 11, 11) and enc.freqs.shape == (32,)
    for axis, n in enumerate(enc.sections):  # each axis its own ladder from 1 towards 1 / theta
        torch.testing.assert_close(enc.ladder(axis), 1.0 / 100.0 ** (torch.arange(n) / n))
    custom = vispe.build_encoding('rope_axial', dim=128, num_heads=2, ndim=3, sections=(8, 12, 12))
    assert custom.sections == (8, 12, 12)
    with pytest.raises(ValueError, match=r'add up to the head dim / 2 = 32; e.g. sections=\(10, 11, 11\)'):
        vispe.build_encoding('rope_axial', dim=128, num_heads=2, ndim=3, sections=(8, 8, 8))
    with pytest.raises(ValueError, match='even head dim'):
        vispe.build_encoding('rope_axial', dim=14, num_heads=2, ndim=3)


def test_channel_order_is_column_row_time() -> None:
    """Token (t, r, c) = (1, 0, 0) turns time's pairs only, the last ones; (0, 0, 1) the column's, the first ones."""
    enc = vispe.build_encoding('rope_axial', dim=64, num_heads=2, ndim=3)  # head dim 32: sections (5, 5, 6)
    n_t, n_h, n_w = enc.sections
    angles = enc.angles(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    assert torch.equal(angles[0, : n_w + n_h], torch.zeros(n_w + n_h)) and (angles[0, n_w + n_h :] > 0).all()
    assert (angles[1, :n_w] > 0).all() and torch.equal(angles[1, n_w:], torch.zeros(n_h + n_t))


def logits(enc, q, k, pos: Positions) -> torch.Tensor:
    q2, k2 = enc.rotate(q, k, pos)
    return q2 @ k2.transpose(-1, -2)


@pytest.mark.parametrize('name', ['rope_axial', 'rope3d'])
def test_patch_logits_depend_on_offsets_in_time_and_space_only(name: str) -> None:
    """The same clip shifted by whole tubelets in t, h and w: every patch-patch logit is unchanged."""
    enc = vispe.build_encoding(name, dim=96, num_heads=2, ndim=3)
    torch.manual_seed(1)
    q, k = torch.randn(1, 2, 1 + 24, 48), torch.randn(1, 2, 1 + 24, 48)
    pos = video_positions(2, 3, 4, num_prefix=1)
    moved = Positions(pos.coords + torch.tensor([5.0, 2.0, 7.0]), grid=pos.grid, num_prefix=1)
    moved_logits, plain = logits(enc, q, k, moved)[..., 1:, 1:], logits(enc, q, k, pos)[..., 1:, 1:]
    torch.testing.assert_close(moved_logits, plain, atol=1e-4, rtol=1e-4)  # float32 angles of a few radians
    assert not torch.allclose(logits(enc, q, k, moved)[..., 0, 1:], logits(enc, q, k, pos)[..., 0, 1:])


def test_time_spacing_puts_a_slower_clip_on_the_faster_clips_even_tubelets() -> None:
    enc = vispe.build_encoding('rope_axial', dim=96, num_heads=2, ndim=3)
    slow = video_positions(3, 2, 2, time_spacing=2.0)
    fast = video_positions(6, 2, 2)
    even = fast.coords.reshape(6, 4, 3)[::2].reshape(-1, 3)
    assert torch.equal(slow.coords, even) and slow.grid_span == (6.0, 2, 2)
    torch.testing.assert_close(enc.table(slow)[0], enc.table(fast)[0].reshape(6, 4, 24, 2)[::2].reshape(12, 24, 2))


def test_strategies_scale_frame_count_and_frame_size_separately() -> None:
    enc = vispe.build_encoding('rope_axial', dim=96, num_heads=2, ndim=3, grid_size=(4, 8, 8))
    enc.strategy = 'interpolate'
    assert enc.axis_scales(torch.zeros(1, 3), (8, 8, 8)) == (2.0, 1.0, 1.0)  # twice the frames
    assert enc.axis_scales(torch.zeros(1, 3), (4, 16, 8)) == (1.0, 2.0, 1.0)  # twice the rows
    freqs = enc.axis_frequencies((2.0, 1.0, 1.0))
    torch.testing.assert_close(freqs[0], enc.ladder(0) / 2)
    assert torch.equal(freqs[1], enc.ladder(1)) and torch.equal(freqs[2], enc.ladder(2))
    # a clip at half the frame rate spans the training time: no scaling, interpolation is the identity there
    slow = video_positions(2, 8, 8, time_spacing=2.0)
    assert enc.axis_scales(slow.coords, slow.grid_span) == (1.0, 1.0, 1.0)
    enc.strategy = 'ntk'
    d_t = enc.axis_dims[0]
    ntk = enc.axis_frequencies((2.0, 1.0, 1.0))[0]
    assert ntk[0] == enc.ladder(0)[0] and torch.allclose(ntk[-1], enc.ladder(0)[-1] / 2)  # fastest kept, slowest / s
    assert math.isclose(d_t, 2 * enc.sections[0])


def test_2d_rope_axial_is_unchanged_by_the_sections() -> None:
    """Images: d/4 pairs an axis, columns first, the paper's ladder: the angles of the original formula."""
    enc = vispe.build_encoding('rope_axial', dim=128, num_heads=4)  # head dim 32
    pos = grid_positions(3, 5)
    w = 1.0 / 100 ** (torch.arange(8) / 8)
    expected = torch.cat([pos.coords[:, 1:] * w, pos.coords[:, :1] * w], dim=-1)
    torch.testing.assert_close(enc.angles(pos.coords), expected)
    with pytest.raises(ValueError, match='divisible by 4'):
        vispe.build_encoding('rope_axial', dim=12, num_heads=2)  # head dim 6: not two equal axes


# --- absolute encodings in 3D ------------------------------------------------------------------------------------
def test_ape_learned_resamples_each_axis_separately() -> None:
    enc = vispe.build_encoding('ape_learned', dim=8, grid_size=(4, 3, 3))
    table = enc.pos_embed.detach()
    assert table.shape == (1, 36, 8)
    assert torch.equal(enc.table((4, 3, 3)), enc.pos_embed)  # the training grid: the table itself
    frames = table.reshape(4, 9, 8)
    # more frames, same size: each spatial entry's sequence interpolated linearly in time
    longer = enc.table((8, 3, 3)).reshape(8, 9, 8)
    expected = torch.nn.functional.interpolate(frames.permute(1, 2, 0), size=8, mode='linear', align_corners=False)
    torch.testing.assert_close(longer, expected.permute(2, 0, 1))
    # larger frames, same count: each frame's table resampled as timm resamples an image table
    larger = enc.table((4, 6, 5)).reshape(4, 30, 8)
    for t in range(4):
        ref = resample_abs_pos_embed(frames[t : t + 1], new_size=[6, 5], old_size=[3, 3], num_prefix_tokens=0)
        torch.testing.assert_close(larger[t], ref[0], atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # a table constant in time stays so at any frame count
        enc.pos_embed.copy_(frames[:1].expand(4, 9, 8).reshape(1, 36, 8))
    torch.testing.assert_close(enc.table((7, 3, 3)).reshape(7, 9, 8), frames[:1].expand(7, 9, 8))


def test_ape_learned_refuses_a_grid_of_the_other_kind() -> None:
    enc = vispe.build_encoding('ape_learned', dim=8, grid_size=(4, 3, 3))
    with pytest.raises(ValueError, match=r'needs the tokens to form a video grid \(t, h, w\), got grid \(3, 3\)'):
        enc.embed(torch.zeros(1, 9, 8), grid_positions(3, 3))
    with pytest.raises(ValueError, match='grid_sample.*for video use'):
        enc.strategy = 'grid_sample'
        enc.embed(torch.zeros(1, 36, 8), video_positions(4, 3, 3))


def test_ape_sincos_in_3d_is_column_row_time_sin_cos() -> None:
    coords = video_positions(3, 2, 4).coords
    emb = sincos_embed(coords, 48, ndim=3)  # 24 pairs: 8 per axis
    w = 1.0 / 10000.0 ** (torch.arange(8) / 8)
    parts = []
    for axis in (2, 1, 0):
        parts += [(coords[:, axis, None] * w).sin(), (coords[:, axis, None] * w).cos()]
    torch.testing.assert_close(emb, torch.cat(parts, -1))
    # the 2D form is unchanged: column, then row
    flat = grid_positions(2, 3).coords
    w2 = 1.0 / 10000.0 ** (torch.arange(4) / 4)
    cols, rows = flat[:, 1:] * w2, flat[:, :1] * w2
    torch.testing.assert_close(sincos_embed(flat, 16), torch.cat([cols.sin(), cols.cos(), rows.sin(), rows.cos()], -1))


def test_rotation_tables_are_real_and_prefix_rows_do_not_turn() -> None:
    enc = vispe.build_encoding('rope_axial', dim=96, num_heads=2, ndim=3)
    table = enc.table(video_positions(2, 2, 2, num_prefix=1))[0]
    assert table.dtype == torch.float32 and table.shape == (9, 24, 2)
    torch.testing.assert_close(table[0], cos_sin_table(torch.zeros(1, 24))[0])


# --- rope_mixed in 3D --------------------------------------------------------------------------------------------
def test_rope_mixed_in_3d_starts_as_rotated_axial_groups_and_adds_time() -> None:
    torch.manual_seed(3)
    enc = vispe.build_encoding('rope_mixed', dim=64, num_heads=2, ndim=3)  # head dim 32: sections (5, 5, 6)
    assert enc.freqs.shape == (3, 2, 16) and enc.sections == (5, 5, 6)
    for h in range(2):
        start, directions = 0, []
        for n in enc.sections:  # each group along one direction, magnitudes the ladder 1 / theta^(k / n)
            group = enc.freqs[:, h, start : start + n].detach()
            torch.testing.assert_close(group.norm(dim=0), 1.0 / 10.0 ** (torch.arange(n) / n))
            direction = group / group.norm(dim=0)
            torch.testing.assert_close(direction, direction[:, :1].expand_as(direction))
            directions.append(direction[:, 0])
            start += n
        frame = torch.stack(directions, dim=1)
        torch.testing.assert_close(frame.T @ frame, torch.eye(3), atol=1e-5, rtol=1e-5)  # a rotation's columns
    coords = torch.tensor([[2.0, 3.0, 5.0]])  # (t, row, col)
    f = enc.freqs.detach()
    torch.testing.assert_close(enc.angles(coords)[:, 0], 5.0 * f[0] + 3.0 * f[1] + 2.0 * f[2])


def test_rope_mixed_in_3d_strategies_scale_each_component_by_its_axis() -> None:
    enc = vispe.build_encoding('rope_mixed', dim=64, num_heads=2, ndim=3, grid_size=(2, 4, 4))
    enc.strategy = 'interpolate'
    factors = enc.frequency_factors((2.0, 1.0, 1.0))  # twice the frames
    assert torch.equal(factors[2], torch.full_like(factors[2], 0.5))  # f_t halved
    assert torch.equal(factors[0], torch.ones_like(factors[0])) and torch.equal(factors[1], factors[0])
    enc.strategy = 'ntk'
    ntk = enc.frequency_factors((2.0, 1.0, 1.0))[2]  # (H, d/2): within each group the fastest kept
    mags = enc.freqs.detach().norm(dim=0)
    start = 0
    for n in enc.sections:
        block, group = ntk[:, start : start + n], mags[:, start : start + n]
        fastest = group.argmax(dim=-1)
        assert torch.equal(block.gather(1, fastest[:, None]), torch.ones(2, 1))
        assert torch.allclose(block.min(dim=-1).values, torch.full((2,), 0.5))  # the slowest: / s
        start += n
    with pytest.raises(ValueError, match='sections are for video'):
        vispe.build_encoding('rope_mixed', dim=64, num_heads=2, sections=(8, 8))


def test_2d_rope_mixed_is_unchanged() -> None:
    """Images keep timm's init and the f_x col + f_y row angles, bit for bit."""
    from timm.layers.pos_embed_sincos import init_random_2d_freqs

    torch.manual_seed(5)
    enc = vispe.build_encoding('rope_mixed', dim=64, num_heads=2)
    torch.manual_seed(5)
    torch.testing.assert_close(enc.freqs.detach(), init_random_2d_freqs(32, 1, 2, temperature=10.0)[:, 0])
    coords = grid_positions(2, 3).coords
    f = enc.freqs.detach()
    expected = coords[None, :, 1, None] * f[0][:, None] + coords[None, :, 0, None] * f[1][:, None]
    assert torch.equal(enc.angles(coords), expected)


def test_a_clip_one_patch_column_wide_in_bf16_autocast_is_near_float32() -> None:
    """oneDNN (torch 2.14, CPU) gets a strided bf16 convolution one column wide wrong (NaN at times): the tubelet
    embedding takes the patch embeddings' workaround. Before: the space-time ViT gave NaN on such clips under bf16
    autocast (the fuzz test found it)."""
    torch.manual_seed(0)
    conv = PatchConv3d(3, 48, kernel_size=(1, 2, 2), stride=(1, 2, 2))
    x = torch.randn(1, 3, 3, 4, 2)  # 3 x 2 x 1 tubelets
    ref = conv(x)
    for _ in range(20):
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = conv(x)
        assert torch.isfinite(out.float()).all() and (out.float() - ref).abs().max() < 0.1
    model = VideoTransformer(num_classes=5, img_size=(2, 2), num_frames=1, patch_size=2, tubelet_size=1, embed_dim=48,
                             depth=1, num_heads=1)  # fmt: skip
    assert type(model.patch_embed) is PatchConv3d and 'patch_embed.weight' in model.state_dict()
