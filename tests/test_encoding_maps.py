"""Position maps (vispe.evaluation.encoding_maps) and ``vispe show-encoding``: properties of the maps, not pixels."""

from __future__ import annotations

import json

import pytest
import torch
from kornia.geometry.linalg import transform_points

import vispe
from vispe import geometry
from vispe.cli import show_encoding
from vispe.evaluation.camera_maps import RIG, Rig, ViewStack, camera_positions, plane_depths, rig_cameras
from vispe.evaluation.encoding_maps import (
    PROBE_DIM,
    PROBE_HEADS,
    build_probe,
    encoding_maps,
    kernel,
    model_maps,
    similarity,
    why_not_drawn,
)


def one_map(result, strategy=None, size=None, query=None):
    """The values of the one map matching ``strategy``, ``size`` (a side) and ``query`` (row, column)."""
    found = [
        m
        for m in result['maps']
        if (strategy is None or m['strategy'] == strategy)
        and (size is None or m['size'] == [size, size])
        and (query is None or m['query'] == list(query))
    ]
    assert len(found) == 1, [(m['strategy'], m['size'], m['query']) for m in result['maps']]
    return torch.tensor(found[0]['values'], dtype=torch.float64)


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_every_encoding_draws_at_a_tiny_grid(name):
    assert why_not_drawn(name) is None
    result = encoding_maps([name], grid=4, sizes=[4, 8])
    assert result['skipped'] == []
    assert {tuple(m['size']) for m in result['maps']} == {(4, 4), (8, 8)}
    for entry in result['maps']:
        values = torch.tensor(entry['values'])
        h, w = entry['size']
        assert values.shape == (h, entry.get('views', 1) * w)  # a camera encoding's two views side by side
        assert ('rig' in entry) == (entry.get('views', 1) > 1)
        assert torch.isfinite(values).all()
        if entry['kind'] == 'similarity':  # a vector's cosine with itself
            assert values[tuple(entry['query'])] == pytest.approx(1.0)


def camera_map(spec, size=4, rig=RIG, world=None, query=(2, 2)):
    """(h, 2 w) map of ``spec`` at its auto kind for ``query`` in view 1 on ``rig``, both cameras moved by ``world``."""
    probe = build_probe(spec, size)
    stack, pos = ViewStack(probe), camera_positions((size, size), rig, world)
    row = [query[0] * size + query[1]]
    if 'rotate' in probe[spec.split(':')[0]].active_hooks():
        content = torch.randn(PROBE_DIM, generator=torch.Generator().manual_seed(1))
        values = kernel(stack, pos, row, content, PROBE_HEADS).mean(0)
    else:
        values = similarity(stack, pos, row, PROBE_DIM)
    return values[0].reshape(2, size, size)


#: a rigid motion of the world: a camera pose at (1, 2, 3) looking at the origin
WORLD = geometry.look_at(torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3))


@pytest.mark.parametrize(
    'spec, invariant',
    [('gta', True), ('prope', True), ('plucker:relative=true', True), ('plucker', False), ('petr', False)],
)
def test_moving_both_cameras_by_one_rigid_motion_keeps_a_relative_encodings_map(spec, invariant):
    # gta and prope see the cameras only through rho(g_q)^-1 rho(g_k); relative plucker through poses relative to view 1
    before, after = camera_map(spec), camera_map(spec, world=WORLD)
    gap, spread = (before - after).abs().max().item(), (before.max() - before.min()).item()
    assert spread > 1e-3, spec  # the map is not flat
    if invariant:
        assert gap < 1e-4 * max(1.0, spread), (spec, gap)  # float32 pose chains
    else:
        assert gap > 0.01 * spread, (spec, gap, spread)


def test_3dppe_on_true_depth_matches_the_token_of_view_2_that_sees_the_same_point():
    # fov 90 on 4 tokens of 16 px: focal 32 px; view 2 one unit right of view 1, the plane 2 away, parallel: every point
    # shifts 32 * 1 / 2 = 16 px, one token, to the left in view 2
    rig = Rig(fov=90.0, baseline=1.0, depth=2.0, converge=False)
    sim = camera_map('3dppe:depth_source=gt', rig=rig)
    assert sim[1, 2, 1].item() == pytest.approx(1.0, abs=1e-5)  # the same 3D point: the same vector
    others = torch.cat([sim[1].flatten()[:9], sim[1].flatten()[10:]])
    assert others.max() < 1 - 1e-3


def test_the_rigs_tokens_see_the_plane():
    K, poses = rig_cameras((4, 6))
    depth = plane_depths(K, poses, (4, 6))  # (1, 2, 4, 6), not constant in the turned view 2
    assert depth[0, 1].std() > 1e-2
    uv = geometry.pixel_centres(4, 6, stride=RIG.patch)
    cam = geometry.camera_points(K, uv, depth.reshape(1, 2, -1, 1))
    world = transform_points(poses[0], cam[0])  # (2, 24, 3)
    torch.testing.assert_close(world[..., 2], torch.full((2, 24), RIG.depth), rtol=0, atol=1e-5)


def kernel_around(name, queries):
    result = encoding_maps([name], grid=12, queries=queries, kind='kernel', strategies=['none'])
    return [one_map(result, query=q) for q in ((6, 6), (3, 4))]


def test_rope_axial_kernel_is_translation_invariant_and_ape_learned_is_not():
    queries = [(0.5, 0.5), (0.25, 4 / 12)]  # cells (6, 6) and (3, 4)
    # the window of offsets -3..+3 around each query lies inside the 12x12 grid for both
    for name, invariant in (('rope_axial', True), ('ape_learned', False)):
        a, b = kernel_around(name, queries)
        around_a, around_b = a[3:10, 3:10], b[0:7, 1:8]
        gap = (around_a - around_b).abs().max().item()
        spread = (around_a.max() - around_a.min()).item()
        assert spread > 1e-3, name  # the map is not flat
        if invariant:
            assert gap < 1e-5 * max(1.0, spread), (name, gap)  # float32 rotations
        else:
            assert gap > 0.05 * spread, (name, gap, spread)


def test_sincos_similarity_falls_with_distance_on_each_axis():
    sim = one_map(encoding_maps(['ape_sincos'], grid=16, queries=[(0.0, 0.0)]))
    row, col = sim[0, :6], sim[:6, 0]  # from the corner query along each axis, within the fastest decay
    assert (row[1:] < row[:-1]).all(), row
    assert (col[1:] < col[:-1]).all(), col


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed'])
def test_interpolate_at_2x_is_the_1x_map_stretched_by_2(name):
    result = encoding_maps([name], grid=8, sizes=[8, 16], strategies=['interpolate', 'none'], queries=[(0.5, 0.5)])
    one, two = one_map(result, 'interpolate', 8), one_map(result, 'interpolate', 16)
    assert one_map(result, 'interpolate', 16, (8, 8)) is not None
    torch.testing.assert_close(two[::2, ::2], one, rtol=1e-6, atol=1e-6)
    # without interpolation the 2x grid reads unseen offsets: not the stretched map
    none = one_map(result, 'none', 16)
    assert (none[::2, ::2] - one).abs().max() > 1e-2


def test_a_strategy_the_encoding_does_not_take_is_noted():
    result = encoding_maps(['ape_learned', 'rope_axial'], grid=4, strategies=['interpolate'])
    assert {m['strategy'] for m in result['maps'] if m['encoding'] == 'rope_axial'} == {'interpolate'}
    assert {m['strategy'] for m in result['maps'] if m['encoding'] == 'ape_learned'} == {'bicubic'}
    assert any('ape_learned' in n and "'bicubic'" in n for n in result['notes'])


def test_unknown_encoding_raises_naming_the_closest():
    with pytest.raises(ValueError, match='rope_mixed'):
        encoding_maps(['rope_mixd'])


def test_model_maps_use_the_layers_own_weights():
    model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', img_size=64, depth=2, num_classes=2)
    with torch.no_grad():
        model.blocks[0].attn.qkv.bias.zero_()
    result = model_maps(model.eval(), 'rope_axial', grid=4, queries=[(0.5, 0.5)], strategies=['none'])
    layers = [m['layer'] for m in result['maps']]
    assert layers == [0, 1]
    first = one_map({'maps': [m for m in result['maps'] if m['layer'] == 0]})
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.mul_(2)  # a layer's logits are its own qkv's: both q and k doubled
    again = model_maps(model, 'rope_axial', grid=4, queries=[(0.5, 0.5)], strategies=['none'])
    doubled = one_map({'maps': [m for m in again['maps'] if m['layer'] == 0]})
    torch.testing.assert_close(doubled, 4 * first)


def test_command_writes_png_and_json(tmp_path, capsys):
    out = tmp_path / 'maps'
    show_encoding.main(['rope_mixed', 'ape_learned', '--grid', '4', '--sizes', '4', '8', '--out', str(out)])
    result = json.loads((out / 'encoding_maps.json').read_text())
    assert set(result) == {'grid', 'sizes', 'queries', 'maps', 'notes', 'skipped'}
    assert set(result['maps'][0]) == {'encoding', 'kind', 'strategy', 'layer', 'size', 'query', 'values'}
    assert {m['encoding'] for m in result['maps']} == {'rope_mixed', 'ape_learned'}
    assert (out / 'encoding_maps.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert str(out / 'encoding_maps.png') in capsys.readouterr().out


def test_command_with_a_checkpoint_draws_the_model_and_its_attention_distance(tmp_path):
    from test_attention_distance import tiny_checkpoint

    cfg, ckpt = tiny_checkpoint(tmp_path, 'rope_mixed')  # 2 blocks of 2 heads, 4 px patches, trained at 32 px
    config = str(tmp_path / 'rope_mixed.py')
    args = ['--checkpoint', ckpt, '--config', config, '--sizes', '8', '16', '--num-images', '2', '--out', str(tmp_path)]
    show_encoding.main([*args, '--strategies', 'none', 'interpolate'])
    result = json.loads((tmp_path / 'encoding_maps.json').read_text())
    assert result['grid'] == [8, 8]  # 32 px / patch 4
    kinds = {(m['kind'], m['layer'], m['strategy'], tuple(m['size'])) for m in result['maps']}
    assert {(k, layer) for k, layer, _, _ in kinds} == {('kernel', 0), ('kernel', 1)}
    assert {(s, size) for _, _, s, size in kinds} == {
        (s, z) for s in ('none', 'interpolate') for z in ((8, 8), (16, 16))
    }
    for strategy in ('none', 'interpolate'):
        distances = json.loads((tmp_path / f'attention_distance_{strategy}.json').read_text())
        assert distances['strategy'] == strategy and len(distances['sizes']) == 2  # 32 and 64 px: the grids in pixels
        for size in distances['sizes'].values():
            assert len(size['distances']) == 2 and all(len(heads) == 2 for heads in size['distances'])
            assert all(0 < d <= size['max_distance'] for heads in size['distances'] for d in heads)
        assert (tmp_path / f'attention_distance_{strategy}.png').is_file()


def test_command_refuses_bad_input_with_one_line(tmp_path):
    with pytest.raises(SystemExit, match="error: unknown encoding 'rope_mixd'"):
        show_encoding.main(['rope_mixd', '--out', str(tmp_path)])
    with pytest.raises(SystemExit, match='no map to draw.*peg needs'):  # the multi-view transformer refuses it too
        show_encoding.main(['peg+gta', '--out', str(tmp_path)])
    with pytest.raises(SystemExit, match='name encodings'):
        show_encoding.main(['--out', str(tmp_path)])
