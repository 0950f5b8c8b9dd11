"""The tools end to end on tiny settings: Runner training, resume after kill -9, test, eval_resolution, DDP."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import DDP_EPOCHS, changed_keys, run_main, train_in_process

from vispe.engine.checkpoint import read_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, 'configs/vit/vit_tiny_{}_shapes2d_position.py')


def tiny_config(tmp_path, encoding='ape_learned', samples=16, epochs=1, name='tiny.py'):
    """A config inheriting the demo's, shrunk: 2 blocks of width 32, ``samples`` images, batch 8."""
    path = tmp_path / name
    path.write_text(f"""
_base_ = ['{BASE.format(encoding)}']
model = dict(backbone=dict(depth=2, embed_dim=32, num_heads=2))
train_dataloader = dict(batch_size=8, dataset=dict(num_samples={samples}))
val_dataloader = dict(batch_size=16, dataset=dict(num_samples=32))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end={epochs})]
train_cfg = dict(max_epochs={epochs}, val_interval={epochs})
default_hooks = dict(logger=dict(interval=1))
""")
    return str(path)


def run_tool(*args, check=True, timeout=300):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f'{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}')
    return proc


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Two Runner iterations (16 images, batch 8) in process; returns (config, checkpoint, initial state)."""
    tmp = tmp_path_factory.mktemp('train')
    return train_in_process(tiny_config(tmp), str(tmp / 'work'))


def test_runner_trains_two_iterations(trained):
    config, ckpt, init, runner = trained
    assert runner.iter == 2 and runner.epoch == 1
    state = read_checkpoint(ckpt)
    assert state['meta']['iter'] == 2
    changed = changed_keys(init, state['state_dict'])
    assert any('qkv' in k for k in changed), 'the optimizer did not update the attention weights'
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 2 and all(map(lambda v: v == v and v < 10, losses))


def test_eval_resolution_writes_the_json_and_plot(trained, tmp_path):
    config, ckpt, _, _ = trained
    out = tmp_path / 'eval'
    proc = run_tool('tools/eval_resolution.py', config, ckpt, '--resolutions', '32', '48', '--out', str(out))
    results = json.loads((out / 'results.json').read_text())
    assert {'config', 'checkpoint', 'train_resolution', 'metric', 'results'} <= set(results)  # today's schema, kept
    assert results['complete'] and results['failed'] == [] and results['sweep'] == 'resolution'
    assert results['train_resolution'] == 32 and results['metric'] == 'accuracy'
    rows = results['results']
    assert {(r['strategy'], r['resolution']) for r in rows} == {
        (s, r) for s in ('bicubic', 'bilinear', 'nearest') for r in (32, 48)
    }
    assert all(r['encoding'] == 'ape_learned' and 0 <= r['value'] <= 100 for r in rows)
    assert (out / 'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'bicubic' in proc.stdout and 'results.json' in proc.stdout


def test_eval_resolution_rejects_unknown_strategy(trained, tmp_path, capsys):
    config, ckpt, _, _ = trained
    proc = run_main(
        'tools/eval_resolution.py',
        config,
        ckpt,
        '--resolutions',
        '32',
        '--strategy',
        'yarn',
        '--out',
        str(tmp_path),
        capsys=capsys,
    )  # in process: the test above runs the tool as a process
    assert proc.returncode != 0 and "strategies ['yarn'] are not supported" in proc.stderr


def test_test_tool_prints_metrics(trained, tmp_path):
    config, ckpt, _, _ = trained
    proc = run_tool('tools/test.py', config, ckpt, '--work-dir', str(tmp_path))
    assert 'accuracy/top1:' in proc.stdout


def test_test_tool_refuses_a_non_checkpoint_and_leaves_it(trained, tmp_path, capsys):
    config, _, _, _ = trained
    bad = tmp_path / 'notes.pth'
    bad.write_text('my notes, not weights')
    proc = run_main('tools/test.py', config, str(bad), '--work-dir', str(tmp_path / 'w'), capsys=capsys)
    assert proc.returncode != 0 and 'is not a PyTorch checkpoint' in proc.stderr
    assert 'Traceback' not in proc.stderr
    assert bad.read_text() == 'my notes, not weights'


def test_train_rejects_config_typo(tmp_path, capsys):
    path = tmp_path / 'typo.py'
    path.write_text(f"_base_ = ['{BASE.format('rope_axial')}']\ntrain_dataloder = dict(batch_size=2)\n")
    proc = run_main('tools/train.py', str(path), '--work-dir', str(tmp_path / 'w'), capsys=capsys)
    assert proc.returncode != 0 and "did you mean 'train_dataloader'" in proc.stderr


def test_default_hooks_switched_off_with_none(tmp_path):
    """None switches a default hook off, vispe's (which mmengine's Runner would meet with a bare assert) and
    mmengine's own (which must stay None in the config, or the Runner would put its default back)."""
    from mmengine.runner import Runner

    from vispe.engine.config import load_config, without_validation

    names = lambda runner: {type(hook).__name__ for hook in runner.hooks}  # noqa: E731
    config = tiny_config(tmp_path)
    full = names(Runner.from_cfg(without_validation(load_config(config, work_dir=str(tmp_path / 'a')))))
    assert {'RNGStateHook', 'NonFiniteLossHook', 'IterTimerHook'} <= full
    options = {'default_hooks.rng_state': None, 'default_hooks.nonfinite_loss': None, 'default_hooks.timer': None}
    cfg = without_validation(load_config(config, options, work_dir=str(tmp_path / 'b')))
    assert full - names(Runner.from_cfg(cfg)) == {'RNGStateHook', 'NonFiniteLossHook', 'IterTimerHook'}


@pytest.mark.slow
def test_resume_after_kill(tmp_path):
    """kill -9 once the first checkpoint exists; --resume finishes from it instead of starting over."""
    config = tiny_config(tmp_path, encoding='rope_mixed', samples=512, epochs=4)
    work = tmp_path / 'work'
    cmd = [sys.executable, 'tools/train.py', config, '--work-dir', str(work)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (work / 'last_checkpoint').exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, 'training finished before it could be interrupted'
    last = (work / 'last_checkpoint').read_text().strip()
    done_at_kill = read_checkpoint(last)['meta']['epoch']
    assert done_at_kill < 4

    resumed = run_tool('tools/train.py', config, '--work-dir', str(work), '--resume')
    final = read_checkpoint(str(work / 'epoch_4.pth'))
    assert final['meta']['epoch'] == 4 and final['meta']['iter'] == 4 * 64
    log = resumed.stdout + resumed.stderr
    assert 'resumed' in log.lower()
    assert f'Epoch(train) [{done_at_kill}]' not in log  # finished epochs are not trained again


@pytest.mark.slow
@pytest.mark.xdist_group('ddp')
def test_ddp_two_processes_gloo(ddp_run):
    """torchrun with 2 CPU processes (gloo) trains: conftest's DDP run, which test_interrupted resumes against."""
    _, work, log = ddp_run
    assert 'Distributed training: True' in log
    ckpt = read_checkpoint(str(work / f'epoch_{DDP_EPOCHS}.pth'))
    assert ckpt['meta']['iter'] == 2 * DDP_EPOCHS  # 32 images / (2 processes x batch 8) an epoch


def test_a_trained_checkpoint_loads_into_create_model_in_one_call(trained):
    """vispe.create_model(**the config's backbone, checkpoint_path=...) gives the trained backbone; another
    architecture is refused naming what the training config built."""
    import torch
    from mmengine.config import Config

    import vispe
    from vispe.engine.checkpoint import CheckpointError

    config, ckpt, _, runner = trained
    backbone = dict(Config.fromfile(config).model.backbone)
    model = vispe.create_model(**backbone, checkpoint_path=ckpt).eval()
    x = torch.randn(2, 3, 32, 32)
    trained_backbone = runner.model.backbone.eval()
    with torch.no_grad():
        assert torch.equal(model(x), trained_backbone(x))
    with pytest.raises(CheckpointError, match=r'training config built the backbone with: .*embed_dim=32'):
        vispe.create_model(**{**backbone, 'embed_dim': 64}, checkpoint_path=ckpt)
