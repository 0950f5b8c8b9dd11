"""Strict checkpoint loading and protected work dirs (VispeRunner): a mismatched checkpoint is refused naming its
keys, two runs never share a work dir, a resume that cannot work is refused before anything is written, and a
corrupt newest checkpoint is named when resume falls back to an older one."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, run_main
from test_tools import run_tool, tiny_config

from vispe.engine.checkpoint import CheckpointError, checkpoint_candidates, pointed_checkpoint, read_checkpoint
from vispe.engine.config import load_config, without_validation
from vispe.engine.runner import VispeRunner
from vispe.engine.train import train
from vispe.engine.workdir import LOCK_NAME, WorkDirError, WorkDirLock


def runner(config: str, work, **options) -> VispeRunner:
    """A VispeRunner of ``config`` in ``work`` with ``options`` (config keys) set, validation off."""
    cfg = without_validation(load_config(config, work_dir=str(work)))
    cfg.update(options)
    return VispeRunner.from_cfg(cfg)


def snapshot(directory) -> dict:
    """{relative path: (size, mtime, sha256)} of every file below ``directory``."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, 'rb') as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, directory)] = (os.path.getsize(path), os.path.getmtime(path), digest)
    return out


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """One finished tiny ape_learned run (2 epochs of 2 iterations) in its work dir: (config, work dir)."""
    tmp = tmp_path_factory.mktemp('trained')
    config = tiny_config(tmp, epochs=2)
    runner(config, tmp / 'work').train()
    return config, tmp / 'work'


# --- 1. strict loading -------------------------------------------------------------------------------------------
def test_test_tool_refuses_a_checkpoint_of_another_encoding(trained, tmp_path, capsys) -> None:
    """Before: 'accuracy/top1: 9.3750' (chance) and exit 0, the mismatch only in mmengine's log."""
    config, work = trained
    args = ['tools/test.py', config, str(work / 'epoch_2.pth'), '--work-dir', str(tmp_path)]
    proc = run_main(*args, '--cfg-options', 'model.backbone.encoding=rope_mixed', capsys=capsys)  # in process
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith('error: ') and 'does not fit this model' in line
    assert "2 missing keys ('backbone.blocks.0.attn.pe.rope_mixed.freqs'" in line
    assert "1 unexpected key ('backbone.pe.ape_learned.pos_embed')" in line and '--non-strict' in line
    assert 'accuracy/top1' not in proc.stdout


def test_test_tool_non_strict_loads_what_fits_and_lists_the_rest(trained, tmp_path) -> None:
    config, work = trained
    args = ['tools/test.py', config, str(work / 'epoch_2.pth'), '--work-dir', str(tmp_path), '--non-strict']
    proc = run_tool(*args, '--cfg-options', 'model.backbone.encoding=rope_mixed')
    log = proc.stdout + proc.stderr
    assert "2 of the model's keys keep their initial values (backbone.blocks.0.attn.pe.rope_mixed.freqs" in log
    assert "1 of the file's keys were not used (backbone.pe.ape_learned.pos_embed)" in log
    assert 'accuracy/top1:' in proc.stdout


def test_a_test_run_leaves_the_training_config_alone(trained, tmp_path) -> None:
    """mmengine dumps the config of every run into the work dir; a test run with other options would overwrite
    the training run's copy. Test runs write theirs into their own log folder."""
    config, work = trained
    saved = (work / 'tiny.py').read_text()
    run_tool('tools/test.py', config, str(work / 'epoch_2.pth'), '--work-dir', str(work), '--non-strict',
             '--cfg-options', 'model.backbone.encoding=rope_mixed')  # fmt: skip
    assert (work / 'tiny.py').read_text() == saved


def test_runner_load_from_is_strict_unless_asked(trained, tmp_path) -> None:
    config, work = trained
    ckpt = str(work / 'epoch_2.pth')
    # an experiment name of this test's own: mmengine shares the logger of runs of one name started in one second,
    # and another test's runner (under xdist, in this worker) may hold it with its log file elsewhere
    options = dict(load_from=ckpt, experiment_name=f'load_from_strict_{os.getpid()}_{time.time_ns()}')
    cfg_mixed = dict(model=dict(type='ImageClassifier', backbone=dict(load_config(config).model.backbone)))
    cfg_mixed['model']['backbone']['encoding'] = 'rope_mixed'
    with pytest.raises(CheckpointError, match=r'(?s)does not fit.*2 missing keys.*1 unexpected key'):
        runner(config, tmp_path / 'strict', **options, **cfg_mixed).train()
    loose = runner(config, tmp_path / 'loose', load_strict=False, **options, **cfg_mixed)
    init = {k: v.clone() for k, v in loose.model.state_dict().items()}
    loose.load_or_resume()
    saved, now = read_checkpoint(ckpt)['state_dict'], loose.model.state_dict()
    assert torch.equal(now['backbone.head.weight'], saved['backbone.head.weight'])  # what fits is loaded
    freqs = 'backbone.blocks.0.attn.pe.rope_mixed.freqs'
    assert torch.equal(now[freqs], init[freqs])  # what does not keeps its initial values
    log = ''.join(p.read_text() for p in tmp_path.rglob('*.log'))  # both runners share the experiment's logger
    assert f"2 of the model's keys keep their initial values ({freqs}" in log


# --- 2. the work dir -----------------------------------------------------------------------------------------------
def test_a_second_run_in_a_locked_work_dir_is_refused_naming_the_holder(tmp_path) -> None:
    """Before: both runs exit 0, each overwriting the other's checkpoints."""
    config, work = tiny_config(tmp_path), tmp_path / 'work'
    with WorkDirLock(str(work)):  # this test process plays the running training
        proc = run_tool('tools/train.py', config, '--work-dir', str(work), check=False)
        with pytest.raises(WorkDirError, match=f'PID {os.getpid()}'):  # a second run inside one process, too
            runner(config, work)
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert f'is in use by another training run (PID {os.getpid()}' in line and 'another --work-dir' in line
    assert sorted(os.listdir(work)) == [LOCK_NAME], 'the refused run wrote into the work dir'
    train(config, str(work))  # free again once the holder is gone (the command's training, in process)


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path) -> None:
    work = tmp_path / 'work'
    code = (
        'import os, signal, sys; sys.path.insert(0, sys.argv[2]); from vispe.engine.workdir import WorkDirLock\n'
        'WorkDirLock(sys.argv[1]).acquire(); print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGKILL)\n'
    )
    proc = subprocess.run([sys.executable, '-c', code, str(work), ROOT], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL
    dead = int(proc.stdout.split()[0])
    lock = WorkDirLock(str(work))
    previous = lock.acquire()
    assert previous['pid'] == dead, 'the killed run left its details, and the lock is free'
    lock.release()
    assert WorkDirLock(str(work)).acquire() is None, 'a cleanly released lock reports no takeover'


def test_stale_lock_takeover_is_logged_by_training(tmp_path) -> None:
    # a config name of its own: mmengine keys its logger by config name and second, and an earlier run in this
    # process within the same second would hold the log file
    config, work = tiny_config(tmp_path, name='takeover.py'), tmp_path / 'work'
    work.mkdir()
    (work / LOCK_NAME).write_text('{"pid": 999999, "host": "h", "started": 0, "command": "python tools/train.py x"}')
    train(config, str(work))  # what tools/train.py runs, in process (a tool's start-up is a few seconds)
    log = ''.join(p.read_text() for p in work.rglob('*.log'))
    assert 'took over the lock' in log and 'PID 999999' in log


def test_a_fresh_run_refuses_a_work_dir_holding_another_runs_checkpoints(trained, tmp_path, capsys) -> None:
    config, work = trained
    before = snapshot(work)
    proc = run_main('tools/train.py', config, '--work-dir', str(work), capsys=capsys)
    assert proc.returncode == 1 and 'already holds the checkpoints of a run' in proc.stderr
    assert '--resume' in proc.stderr and '--overwrite' in proc.stderr
    assert snapshot(work) == before


def test_overwrite_replaces_them_on_request(tmp_path) -> None:
    config, work = tiny_config(tmp_path), tmp_path / 'work'
    runner(config, work).train()
    first = read_checkpoint(str(work / 'epoch_1.pth'))['state_dict']
    with pytest.raises(WorkDirError, match='already holds'):
        runner(config, work, randomness=dict(seed=1))
    runner(config, work, randomness=dict(seed=1), overwrite_work_dir=True).train()
    second = read_checkpoint(str(work / 'epoch_1.pth'))['state_dict']
    assert not torch.equal(first['backbone.head.weight'], second['backbone.head.weight'])


def test_overwrite_sets_the_replaced_runs_checkpoints_aside(trained, tmp_path) -> None:
    """Before: after --overwrite and a Ctrl-C before the first save, --resume resumed the replaced run (exit 0, nothing
    trained) and its later checkpoints stayed beside the new run's."""
    config, original = trained
    work = tmp_path / 'work'
    shutil.copytree(original, work)
    before = {p.name: p.read_bytes() for p in work.glob('*.pth')}
    runner(config, work, overwrite_work_dir=True).release_work_dir()  # built, then stopped before any save
    assert checkpoint_candidates(str(work)) == [] and not (work / 'last_checkpoint').exists()
    (aside,) = work.glob('replaced-*')
    assert {p.name: p.read_bytes() for p in aside.glob('*.pth')} == before and (aside / 'last_checkpoint').exists()
    resumed = runner(config, work, resume=True)  # nothing of the replaced run is taken: a new run starts
    assert resumed._resume is False
    resumed.release_work_dir()


def test_a_copied_work_dir_resumes_its_own_checkpoint_not_the_originals(trained, tmp_path) -> None:
    """Before: mmengine's last_checkpoint holds an absolute path, so --resume in a copy loaded the original's."""
    config, original = trained
    copy = tmp_path / 'copy'
    shutil.copytree(original, copy)
    assert (copy / 'last_checkpoint').read_text().startswith(str(original))
    assert pointed_checkpoint(str(copy)) == (str(copy / 'epoch_2.pth'), None)
    assert checkpoint_candidates(str(copy))[0] == str(copy / 'epoch_2.pth')
    lone = tmp_path / 'lone'  # only the pointer: the original's checkpoint is named, never resumed
    lone.mkdir()
    shutil.copy(copy / 'last_checkpoint', lone / 'last_checkpoint')
    with pytest.raises(CheckpointError, match='outside this work dir.*nothing was changed'):
        runner(config, lone, resume=True)


def test_a_resume_with_a_changed_encoding_is_refused_before_anything_is_written(trained, capsys) -> None:
    """Before: 'different number of parameter groups' from deep inside mmengine, after the work dir's saved config
    had been overwritten with the new encoding (so evaluating the old checkpoint with it gave a wrong number)."""
    config, work = trained
    before = snapshot(work)
    proc = run_main('tools/train.py', config, '--work-dir', str(work), '--resume', '--cfg-options',
                    'model.backbone.encoding=rope_axial', 'train_cfg.max_epochs=3', capsys=capsys)  # fmt: skip
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert f"cannot resume from '{work}/epoch_2.pth' with this config" in line
    assert "1 unexpected key ('backbone.pe.ape_learned.pos_embed')" in line
    assert "model.backbone.encoding: 'ape_learned' (checkpoint's run) -> 'rope_axial' (now)" in line
    assert snapshot(work) == before, 'a refused resume must leave the work dir exactly as it was'


def test_a_resume_whose_optimizer_groups_changed_is_refused(trained, tmp_path) -> None:
    config, work = trained
    cfg = without_validation(load_config(config, {'train_cfg.max_epochs': 3}, work_dir=str(work)))
    cfg.optim_wrapper.pop('constructor')  # mmengine's default: one parameter group instead of one per decay
    cfg.resume = True
    before = snapshot(work)
    with pytest.raises(CheckpointError, match=r"(?s)parameter groups and this config's has 1.*paramwise_cfg"):
        VispeRunner.from_cfg(cfg)
    assert snapshot(work) == before


def test_a_weights_only_checkpoint_cannot_be_resumed(tmp_path, capsys) -> None:
    """Before: KeyError: 'message_hub', after the config had been overwritten."""
    config, work = tiny_config(tmp_path), tmp_path / 'work'
    work.mkdir()
    model = runner(config, tmp_path / 'other').model
    torch.save({'state_dict': model.state_dict()}, str(work / 'epoch_1.pth'))
    before = snapshot(work)
    proc = run_main('tools/train.py', config, '--work-dir', str(work), '--resume', capsys=capsys)
    assert proc.returncode == 1 and 'holds weights only' in proc.stderr and 'load_from' in proc.stderr
    assert snapshot(work) == before


def test_resume_on_a_missing_work_dir_says_so_and_names_close_ones(tmp_path, capsys) -> None:
    """Before: 'Auto resumed from the latest checkpoint None.' and a new run from scratch in a new folder."""
    config = tiny_config(tmp_path)
    (tmp_path / 'vit_tiny_run').mkdir()
    proc = run_main('tools/train.py', config, '--work-dir', str(tmp_path / 'vit_tiny_rnu'), '--resume', capsys=capsys)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert 'does not exist, so there is no run to continue' in line and 'vit_tiny_run' in line
    assert not (tmp_path / 'vit_tiny_rnu').exists()


def test_resume_on_a_work_dir_without_checkpoints_says_it_starts_anew(tmp_path) -> None:
    config, work = tiny_config(tmp_path, name='anew.py'), tmp_path / 'work'  # its own logger (above)
    work.mkdir()
    train(config, str(work), resume=True)  # tools/train.py --resume, in process
    log = ''.join(p.read_text() for p in work.rglob('*.log'))
    assert (
        'holds no complete checkpoint yet' in log
        and 'starting a new run' in log
        and 'None' not in log.split('holds no complete checkpoint yet')[0][-200:]
    )
    assert (work / 'epoch_1.pth').exists()


def test_a_corrupt_newest_checkpoint_is_named_when_resume_falls_back(tmp_path) -> None:
    # a config name of its own: mmengine shares the logger of runs of one name started in one second, and another
    # test's runner in this process would hold its log file elsewhere
    config = tiny_config(tmp_path, epochs=2, name='corrupt_resume.py')
    work = tmp_path / 'work'
    runner(config, work).train()
    data = bytearray((work / 'epoch_2.pth').read_bytes())
    start = data.index(b'data.pkl') + 40  # inside the pickled object table: the zip directory still reads
    data[start : start + 64] = b'\xff' * 64
    (work / 'epoch_2.pth').write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        read_checkpoint(str(work / 'epoch_2.pth'))
    cfg = load_config(config, {'train_cfg.max_epochs': 3}, work_dir=str(work))
    cfg.resume = True
    resumed = VispeRunner.from_cfg(without_validation(cfg))
    resumed.train()
    log = ''.join(p.read_text() for p in work.rglob('*.log'))
    assert f'checkpoint {work}/epoch_2.pth cannot be resumed from' in log
    assert 'resuming from the older epoch_1.pth instead' in log
    assert read_checkpoint(str(work / 'epoch_3.pth'))['meta']['epoch'] == 3


def test_the_sweeps_load_strictly_unless_asked(trained) -> None:
    """eval_resolution, eval_points, eval_cameras and eval_generation build their model through ``load_model``."""
    from vispe.evaluation.trained_model import load_model

    config, work = trained
    options = {'model.backbone.encoding': 'rope_mixed'}
    with pytest.raises(CheckpointError, match='does not fit this model'):
        load_model(load_config(config, options), str(work / 'epoch_2.pth'), 'cpu')
    with pytest.warns(UserWarning, match="2 of the model's keys keep their initial values"):
        load_model(load_config(config, {**options, 'load_strict': False}), str(work / 'epoch_2.pth'), 'cpu')


def test_non_strict_is_load_strict_false_for_every_tool() -> None:
    import argparse

    from vispe.engine.config import common_parser_args

    parser = argparse.ArgumentParser()
    common_parser_args(parser)
    args = parser.parse_args(['c.py', '--non-strict', '--cfg-options', 'train_cfg.max_epochs=2'])
    assert args.cfg_options == {'load_strict': False, 'train_cfg.max_epochs': 2}
    assert parser.parse_args(['c.py']).cfg_options is None
