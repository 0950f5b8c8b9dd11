"""Resolution strategies as model configuration (an encoding's ``strategy`` key, --cfg-options, tools/test.py) and
the default resolution sweep below, at and above the training size, square and not."""

from __future__ import annotations

import json

import pytest
from conftest import train_in_process
from mmengine.registry import init_default_scope
from test_tools import run_tool, tiny_config

import vispe
from vispe.cli import test as test_cli
from vispe.engine.config import load_config
from vispe.evaluation import report
from vispe.evaluation.trained_model import (
    default_resolutions,
    model_encodings,
    model_patch_size,
    parse_resolution,
    resolution_label,
)
from vispe.registry import MODELS
from vispe.sweeps import resolution as R

ROPE_MIXED = 'configs/vit/vit_tiny_rope_mixed_shapes2d_position.py'


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Two Runner iterations of a tiny rope_mixed ViT (32 px, patch 4: an 8x8 training grid)."""
    tmp = tmp_path_factory.mktemp('train')
    return train_in_process(tiny_config(tmp, encoding='rope_mixed'), str(tmp / 'work'))


def built_strategies(cfg) -> set[str]:
    init_default_scope('vispe')
    return {e.strategy for e in model_encodings(MODELS.build(cfg.model))}


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed', 'harope'])
def test_an_encoding_config_sets_its_strategy(name):
    enc = vispe.build_encoding(dict(type=name, strategy='interpolate'), dim=64, num_heads=4, grid_size=(4, 4))
    assert enc.strategy == 'interpolate'
    assert vispe.build_encoding(name, dim=64, num_heads=4, grid_size=(4, 4)).strategy == 'none'


def test_an_unknown_or_misplaced_strategy_is_a_clear_error():
    with pytest.raises(
        ValueError, match=r"unknown strategy 'lanczos'.*\['none', 'interpolate', 'ntk', 'yarn', 'yarn_paper', 'dype"
    ):
        vispe.build_encoding(dict(type='rope_mixed', strategy='lanczos'), dim=64, num_heads=4, grid_size=(4, 4))
    with pytest.raises(ValueError, match=r"choose one of \['bicubic', 'bilinear', 'nearest', 'grid_sample'\]"):
        vispe.build_encoding(dict(type='ape_learned', strategy='ntk'), dim=64, grid_size=(4, 4))
    assert vispe.build_encoding(dict(type='ape_learned', strategy='nearest'), dim=64).strategy == 'nearest'
    with pytest.raises(ValueError, match='lepe has no resolution strategies'):
        vispe.build_encoding(dict(type='lepe', strategy='interpolate'), dim=64, num_heads=4)
    with pytest.raises(ValueError, match='training grid'):  # a rotary strategy needs the grid a backbone supplies
        vispe.build_encoding(dict(type='rope_axial', strategy='ntk'), dim=64, num_heads=4)


def test_cfg_options_set_the_strategy_of_an_encoding_given_by_name():
    cfg = load_config(ROPE_MIXED, {'model.backbone.encoding.strategy': 'interpolate'})
    assert cfg.model.backbone.encoding == {'type': 'rope_mixed', 'strategy': 'interpolate'}
    assert built_strategies(cfg) == {'interpolate'}
    assert built_strategies(load_config(ROPE_MIXED)) == {'none'}
    bad = load_config(ROPE_MIXED, {'model.backbone.encoding.strategy': 'lanczos'})
    with pytest.raises(ValueError, match='choose one of'):
        built_strategies(bad)


def test_the_test_tool_uses_the_config_strategy(trained, tmp_path, capsys):
    config, ckpt, _, _ = trained
    accuracy = {}
    for strategy in ('none', 'interpolate'):
        options = [f'model.backbone.encoding.strategy={strategy}', 'test_dataloader.dataset.image_size=16']
        test_cli.main([config, ckpt, '--work-dir', str(tmp_path / strategy), '--cfg-options', *options])
        out = capsys.readouterr().out
        accuracy[strategy] = float(out.split('accuracy/top1:')[1].split()[0])
    # eval_resolution switches strategies on the loaded model: the same numbers at 16 px
    results = R.sweep(load_config(config), ckpt, [16], ['none', 'interpolate'], 'cpu', show_progress=False)
    swept = {r['strategy']: r['value'] for r in results['results']}
    assert swept == pytest.approx(accuracy, abs=1e-3)


def test_default_resolutions_below_above_and_at_other_aspects():
    assert default_resolutions(32, 4) == [16, 24, 32, 48, 64, 96, (44, 24), (24, 44)]  # 11x6 and 6x11 tokens
    assert default_resolutions(224, 16) == [112, 176, 224, 336, 448, 672, (320, 160), (160, 320)]
    assert default_resolutions(40, 8)[:2] == [24, 32]  # 0.5x = 20 px is no multiple of 8: the nearest, 24 px
    assert default_resolutions(8, 8, scales=(0.5, 1.0), aspects=()) == [8]  # at least one patch, listed once
    assert default_resolutions((32, 64), 4, scales=(0.5,), aspects=(2.0,)) == [(16, 32), (64, 32)]  # 16x8 tokens
    for train, patch in ((32, 4), (224, 16), (48, 8)):
        tokens = (train // patch) ** 2
        for res in default_resolutions(train, patch)[-2:]:
            h, w = res[0] // patch, res[1] // patch
            assert abs(h * w - tokens) <= min(h, w) / 2 and round(max(h, w) / min(h, w)) == 2


def test_resolutions_parse_and_label_hxw():
    assert [parse_resolution(t) for t in ('16', '32x64', '64X32')] == [16, (32, 64), (64, 32)]
    assert [resolution_label(r) for r in (16, (32, 64), [64, 32])] == ['16', '32x64', '64x32']
    labels = ['96', '44x24', '16', '24x44', '32']  # by pixel count: 44x24 is 66 tokens, 32 is 64
    assert sorted(labels, key=report.resolution_order) == ['16', '32', '24x44', '44x24', '96']


def test_the_default_sweep_runs_below_above_and_non_square(trained, tmp_path):
    config, ckpt, _, _ = trained
    cfg = load_config(config)
    init_default_scope('vispe')
    assert model_patch_size(MODELS.build(cfg.model)) == (4, 4)
    results = R.sweep(cfg, ckpt, None, ['none', 'interpolate'], 'cpu', show_progress=False, out_dir=str(tmp_path))
    expected = [16, 24, 32, 48, 64, 96, (44, 24), (24, 44)]
    cells = [(r['strategy'], r['resolution']) for r in results['results']]
    assert cells == [(s, r) for s in ('none', 'interpolate') for r in expected]
    values = {(r['strategy'], resolution_label(r['resolution'])): r['value'] for r in results['results']}
    assert values[('none', '32')] == values[('interpolate', '32')]  # the training size: the same model
    assert all(0 <= v <= 100 for v in values.values())
    # written as JSON ([H, W] lists), read back into one table with the labels the reports use
    rows = json.loads((tmp_path / 'results.json').read_text())['results']
    table = R.results_pivot(rows, ordered=True)
    assert table.columns == ['16', '24', '32', '24x44', '44x24', '48', '64', '96']
    R.plot_results(rows, str(tmp_path / 'results.png'), train_resolution=32)


def test_eval_resolution_takes_hxw_on_the_command_line(trained, tmp_path):
    config, ckpt, _, _ = trained
    out = tmp_path / 'eval'
    args = ['--resolutions', '16', '32x16', '16x32', '--strategy', 'interpolate', '--out', str(out), '--no-progress']
    proc = run_tool('tools/eval_resolution.py', config, ckpt, *args)
    rows = json.loads((out / 'results.json').read_text())['results']
    assert [resolution_label(r['resolution']) for r in rows] == ['16', '32x16', '16x32']
    assert '32x16' in proc.stdout
