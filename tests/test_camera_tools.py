"""Multi-view tools end to end on tiny settings: a 3-iteration Runner training and the camera-setting sweep."""

from __future__ import annotations

import json
import os

import pytest
from conftest import changed_keys, needs_open3d, run_main, train_in_process
from test_tools import run_tool

from vispe.engine.checkpoint import read_checkpoint
from vispe.sweeps import cameras as camera_sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, 'configs/camera/multiview_tiny_{}_scenes.py')


def tiny_camera_config(tmp_path, encoding='gta') -> str:
    """The demo config shrunk: 1 block of width 32, 24 scenes of 2 views of 16 px, batch 8 (3 iterations). Where
    open3d is missing, the test that asks for it (MultiViewScenes renders with open3d) is skipped."""
    needs_open3d()
    path = tmp_path / f'tiny_{encoding}.py'
    path.write_text(f"""
_base_ = ['{BASE.format(encoding)}']
model = dict(backbone=dict(depth=1, embed_dim=32, num_heads=2, img_size=16))
train_dataloader = dict(batch_size=8, dataset=dict(num_samples=24, image_size=16))
val_dataloader = dict(batch_size=10, dataset=dict(num_samples=10, image_size=16))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)]
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=1))
camera_eval = dict(settings=dict(_delete_=True, train=dict(), views_3=dict(num_views=3), image_24=dict(image_size=24)))
""")
    return str(path)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('camera_train')
    return train_in_process(tiny_camera_config(tmp), str(tmp / 'work'))


def test_runner_trains_three_iterations(trained) -> None:
    _, ckpt, init, runner = trained
    assert runner.iter == 3
    state = read_checkpoint(ckpt)['state_dict']
    changed = changed_keys(init, state)
    assert any('qkv' in k for k in changed) and any('translation_scale' in k for k in changed)  # gta's scale learns
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 3 and all(0 < v < 20 for v in losses)
    metrics = runner.message_hub.get_scalar('val/loc3d/mean_error').current()
    assert metrics > 0


def test_eval_cameras_writes_json_and_plot(trained, tmp_path, capsys) -> None:
    config, ckpt, _, _ = trained
    out = tmp_path / 'eval'
    proc = run_tool('tools/eval_cameras.py', config, ckpt, '--out', str(out), '--no-progress')
    results = json.loads((out / 'results.json').read_text())
    assert results['metric'] == 'loc3d' and results['threshold'] == 0.2
    rows = results['results']
    assert [r['setting'] for r in rows] == ['train', 'views_3', 'image_24']
    assert rows[1]['overrides'] == {'num_views': 3}
    assert all(r['encoding'] == 'gta' and r['mean_error'] > 0 and 0 <= r['value'] <= 100 for r in rows)
    assert (out / 'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'views_3' in proc.stdout
    assert camera_sweep.markdown_table(rows).splitlines()[0] == '| encoding | train | views_3 | image_24 |'
    bad = run_main('tools/eval_cameras.py', config, ckpt, '--settings', 'moon', '--out', str(tmp_path), capsys=capsys)
    assert bad.returncode != 0 and "unknown camera settings ['moon']" in bad.stderr


def test_eval_cameras_reuses_the_settings_it_finished(trained, tmp_path) -> None:
    from vispe.engine.config import load_config

    config, ckpt, _, _ = trained
    cfg, out, logged = load_config(config), str(tmp_path / 'eval'), []
    first = camera_sweep.sweep(cfg, ckpt, ['train'], 'cpu', show_progress=False, out_dir=out)
    both = camera_sweep.sweep(
        cfg, ckpt, ['train', 'views_3'], 'cpu', show_progress=False, out_dir=out, log=logged.append
    )
    assert any('reusing 1 of 2 finished cells' in line for line in logged)
    assert both['results'][0] == first['results'][0] and both['complete']
