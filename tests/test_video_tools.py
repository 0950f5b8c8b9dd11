"""The video pipeline end to end on tiny settings: a 3-iteration Runner training of the space-time ViT on ShapesVideo,
its checkpoint's meta, and the frame-count and frame-size sweep (tools/eval_video.py)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT, changed_keys, run_main, train_in_process
from test_tools import run_tool

from vispe.engine.checkpoint import read_checkpoint
from vispe.engine.config import load_config
from vispe.sweeps import video as video_sweep


def tiny_video_config(tmp_path, encoding: str = 'rope_axial') -> str:
    """The video config shrunk: 2 blocks of width 48, 24 clips of 4 frames of 16 px, batch 8 (3 iterations)."""
    base = os.path.join(ROOT, 'configs/video/video_tiny_rope_axial_shapes_video.py')
    path = tmp_path / f'tiny_video_{encoding}.py'
    path.write_text(f"""
_base_ = ['{base}']
model = dict(backbone=dict(encoding='{encoding}', depth=2, embed_dim=48, num_heads=2, img_size=16, num_frames=4))
train_dataloader = dict(batch_size=8, dataset=dict(num_samples=24, num_frames=4, image_size=16))
val_dataloader = dict(batch_size=16, dataset=dict(num_samples=16, num_frames=4, image_size=16))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)]
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=1))
""")
    return str(path)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('video_train')
    return train_in_process(tiny_video_config(tmp), str(tmp / 'work'))


def test_runner_trains_the_video_model_and_records_its_clips(trained) -> None:
    _, ckpt, init, runner = trained
    assert runner.iter == 3
    state = read_checkpoint(ckpt)
    changed = changed_keys(init, state['state_dict'])
    assert any('patch_embed' in k for k in changed) and any('qkv' in k for k in changed)
    assert state['meta']['train_frames'] == 4 and state['meta']['train_resolution'] == 16
    assert state['meta']['dataset_meta']['classes'][0] == 'right'


def test_eval_video_sweeps_frames_and_sizes_under_every_strategy(trained, tmp_path) -> None:
    config, ckpt, _, _ = trained
    out = tmp_path / 'eval'
    proc = run_tool(
        'tools/eval_video.py', config, ckpt, '--frames', '4', '8', '--sizes', '16', '24', '--strategy', 'none',
        'interpolate', '--out', str(out), '--no-progress',
    )  # fmt: skip
    results = json.loads((out / 'results.json').read_text())
    assert results['train_frames'] == 4 and results['train_resolution'] == 16 and results['time'] == 'tubelets'
    rows = results['results']
    cells = [(r['strategy'], r['sweep'], r['setting'], r['factor']) for r in rows]
    assert cells == [
        ('none', 'frames', 4, 1.0),
        ('none', 'frames', 8, 2.0),
        ('interpolate', 'frames', 4, 1.0),
        ('interpolate', 'frames', 8, 2.0),
        ('none', 'size', 16, 1.0),
        ('none', 'size', 24, 1.5),
        ('interpolate', 'size', 16, 1.0),
        ('interpolate', 'size', 24, 1.5),
    ]
    assert all(r['encoding'] == 'rope_axial' and 0 <= r['value'] <= 100 for r in rows)
    by_cell = {(r['strategy'], r['sweep'], r['setting']): r['value'] for r in rows}
    # at the training setting every strategy is the model itself, in both halves of the sweep
    assert by_cell[('none', 'frames', 4)] == by_cell[('interpolate', 'frames', 4)] == by_cell[('none', 'size', 16)]
    assert (out / 'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert '2x frames' in proc.stdout and '1.5x size' in proc.stdout
    table = video_sweep.markdown_table(rows)
    assert table.splitlines()[0] == '| encoding | strategy | 1x frames | 2x frames | 1x size | 1.5x size |'


def test_clip_time_tells_the_model_the_frame_rate(trained, tmp_path) -> None:
    """--time clip: 8 frames of a 4-frame model sit at half steps, so 'interpolate' (which squeezes 8 tubelet steps
    onto 4) and 'none' at clip time see the same positions: the same accuracy."""
    config, ckpt, _, _ = trained
    cfg = load_config(config)
    clip = video_sweep.sweep(cfg, ckpt, [8], [16], ['none'], 'cpu', time='clip', show_progress=False)
    steps = video_sweep.sweep(cfg, ckpt, [8], [16], ['interpolate'], 'cpu', show_progress=False)
    assert clip['time'] == 'clip'
    assert clip['results'][0]['value'] == steps['results'][0]['value']


def test_bad_settings_are_refused_before_any_cell(trained, tmp_path, capsys) -> None:
    config, ckpt, _, _ = trained
    proc = run_main('tools/eval_video.py', config, ckpt, '--frames', '5', '--out', str(tmp_path), capsys=capsys)
    assert proc.returncode != 0 and '--frames 5 is 5 frames of 16x16' in proc.stderr
    assert not (tmp_path / 'results.json').exists()
    cfg = load_config(config)
    with pytest.raises(ValueError, match=r"time must be one of \('tubelets', 'clip'\)"):
        video_sweep.sweep(cfg, ckpt, [4], [16], ['none'], 'cpu', time='seconds', show_progress=False)


def test_default_settings_round_to_the_tubelet_and_the_patch() -> None:
    assert video_sweep.default_settings(8, 32, 2, 4) == {'frames': [4, 8, 16, 32], 'sizes': [16, 24, 32, 48, 64]}
    assert video_sweep.default_settings(4, 16, 2, 4) == {'frames': [2, 4, 8, 16], 'sizes': [8, 12, 16, 24, 32]}
