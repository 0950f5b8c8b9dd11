"""DiT end to end on tiny settings: tools/train.py with EMA and RPE-2D crops, then tools/eval_generation.py."""

import json
import os

import pytest
import torch
from conftest import run_main
from mmengine.registry import init_default_scope
from test_tools import ROOT, run_tool

from vispe.engine.checkpoint import read_checkpoint
from vispe.engine.config import load_config
from vispe.registry import MODELS

BASE = os.path.join(ROOT, 'configs/dit/dit_tiny_rope_axial_rpe2d_shapes2d.py')
CLASSIFIER = os.path.join(ROOT, 'configs/dit/classifier_shapes2d_shape_color.py')


#: one xdist worker runs this module (make test's --dist loadgroup), so its module fixture runs once
#: (a DiT trained through tools/train.py)
pytestmark = pytest.mark.xdist_group('dit_tools')


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Three iterations of a 2-block DiT through tools/train.py; returns (config, checkpoint, tmp dir)."""
    tmp = tmp_path_factory.mktemp('dit')
    config = tmp / 'dit_tiny.py'
    config.write_text(f"""
_base_ = ['{BASE}']
model = dict(backbone=dict(depth=2, embed_dim=32, num_heads=2))
train_dataloader = dict(batch_size=8)
val_dataloader = dict(batch_size=16, dataset=dict(num_samples=16))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=3, val_interval=3)
param_scheduler = [dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=3)]  # the warm-up, shortened
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=3))
generation_eval = dict(steps=2, classifier_checkpoint='{tmp}/classifier.pth')
""")
    run_tool('tools/train.py', str(config), '--work-dir', str(tmp / 'work'))
    # an untrained feature extractor is enough to exercise FD / KID
    init_default_scope('vispe')
    classifier = MODELS.build(load_config(CLASSIFIER).model)
    torch.save({'state_dict': classifier.state_dict()}, tmp / 'classifier.pth')
    return str(config), str(tmp / 'work' / 'iter_3.pth'), tmp


def test_training_keeps_ema_weights_in_the_checkpoint(trained):
    _, ckpt, _ = trained
    state = read_checkpoint(ckpt)  # weights_only=True with vispe's allow-list
    assert state['meta']['iter'] == 3
    ema, online = state['state_dict'], state['ema_state_dict']
    key = 'backbone.blocks.0.attn.qkv.weight'
    assert key in ema and f'module.{key}' in online
    # EMA (decay 0.999) of 3 steps stays next to the initial weights, unlike the online ones: they differ
    assert not torch.equal(ema[key], online[f'module.{key}'])


def test_eval_generation_scores_every_strategy_and_resolution(trained):
    config, ckpt, tmp = trained
    out = tmp / 'gen'
    args = ['--resolutions', '32', '48', '--samples-per-class', '1', '--strategy', 'none', 'yarn', '--out', str(out)]
    proc = run_tool('tools/eval_generation.py', config, ckpt, *args)
    assert 'count_accuracy' in proc.stdout and 'denoising_mse' in proc.stdout
    results = json.loads((out / 'results.json').read_text())
    assert results['train_resolution'] == 32 and results['settings']['steps'] == 2
    cells = {(r['strategy'], r['resolution'], r['metric']): r['value'] for r in results['results']}
    for strategy in ('none', 'yarn'):
        for res in (32, 48):
            assert 0 <= cells[(strategy, res, 'count_accuracy')] <= 100
            assert cells[(strategy, res, 'fd')] >= 0 and cells[(strategy, res, 'denoising_mse')] > 0
            assert (out / f'samples_{strategy}_{res}.png').is_file()
    # at the training resolution every strategy is the identity: same samples, same scores
    assert cells[('none', 32, 'fd')] == cells[('yarn', 32, 'fd')]
    assert cells[('none', 48, 'denoising_mse')] != cells[('none', 32, 'denoising_mse')]


def test_generation_sweep_reuses_its_cells_and_refuses_other_sample_settings(trained, tmp_path):
    from vispe.sweeps.engine import SweepConflict
    from vispe.sweeps.generation import sweep_generation

    config, ckpt, _ = trained
    cfg, out, logged = load_config(config), str(tmp_path / 'gen'), []
    first = sweep_generation(cfg, ckpt, [32], ['none'], 1, out_dir=out, device='cpu', log=logged.append)
    assert first['complete'] and first['train_resolution'] == 32
    logged.clear()
    again = sweep_generation(cfg, ckpt, [32], ['none'], 1, out_dir=out, device='cpu', log=logged.append)
    assert again['results'] == first['results'] and any('reusing 1 of 1' in line for line in logged)
    assert not any('sampling' in line for line in logged)
    with pytest.raises(SweepConflict, match='another settings'):
        sweep_generation(cfg, ckpt, [32], ['none'], 2, out_dir=out, device='cpu')


def test_eval_generation_says_how_to_get_the_feature_extractor(trained, tmp_path, capsys):
    config, ckpt, _ = trained
    args = ['--resolutions', '32', '--samples-per-class', '1', '--out', str(tmp_path)]
    proc = run_main(
        'tools/eval_generation.py', config, ckpt, *args, '--classifier-checkpoint', 'missing.pth', capsys=capsys
    )
    assert proc.returncode != 0 and 'vispe train' in proc.stderr and 'tools/train.py' in proc.stderr
    assert '--no-fd' in proc.stderr


def test_eval_generation_refuses_a_classifier_config(trained, tmp_path, capsys):
    _, ckpt, _ = trained
    args = ['--resolutions', '32', '--out', str(tmp_path), '--no-fd']
    proc = run_main('tools/eval_generation.py', CLASSIFIER, ckpt, *args, capsys=capsys)
    assert proc.returncode != 0 and 'error:' in proc.stderr and 'Traceback' not in proc.stderr


def test_generation_sweep_is_reused_until_the_feature_extractor_changes(trained):
    from vispe.cli.demo_dit import train_and_generate
    from vispe.experiments.compare import Run

    config, ckpt, tmp = trained
    run = Run('shape_color', config, str(tmp / 'work'))
    logged = []
    first = train_and_generate(run, ['32'], ['none'], 1, logged.append)
    assert first['feature_extractor'] == str(tmp / 'classifier.pth')
    assert not any('results.json' in line and 'reusing' in line for line in logged)
    logged.clear()
    assert train_and_generate(run, ['32'], ['none'], 1, logged.append) == first
    assert any('reusing' in line and 'results.json' in line for line in logged)
    # a retrained feature extractor makes the old FD / KID stale: the sweep runs again
    os.utime(tmp / 'classifier.pth')
    logged.clear()
    train_and_generate(run, ['32'], ['none'], 1, logged.append)
    assert not any('reusing' in line and 'results.json' in line for line in logged)
