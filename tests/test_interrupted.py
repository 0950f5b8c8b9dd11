"""Interrupted and diverged training: atomic checkpoint writes, resume after kill -9 at random moments (bit for bit
on CPU, dropout included), a kill in the middle of a checkpoint write, the iteration-based DiT and a 2-process DDP
run resumed bit for bit, and the stop at the first non-finite loss."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import DDP_EPOCHS, ROOT, torchrun_cmd
from test_tools import tiny_config

from vispe.engine.atomic import PARTIAL, atomic_open, atomic_write, remove_partial_files
from vispe.engine.checkpoint import is_complete_checkpoint, latest_checkpoint, read_checkpoint
from vispe.files import sha256

EPOCHS = DDP_EPOCHS  # of 2 iterations (16 images, batch 8): a checkpoint after each epoch, the last two kept


# --- atomic files ------------------------------------------------------------------------------------------------
def test_a_failed_write_leaves_the_old_file(tmp_path) -> None:
    path = tmp_path / 'last_checkpoint'
    atomic_write(str(path), 'epoch_1.pth')
    with pytest.raises(RuntimeError), atomic_open(str(path)) as f:
        f.write('epoch_2')
        raise RuntimeError('killed half way')
    assert path.read_text() == 'epoch_1.pth' and os.listdir(tmp_path) == ['last_checkpoint']
    with pytest.raises(ValueError, match='mode'):
        with atomic_open(str(path), 'a'):
            pass


def test_a_killed_writer_leaves_the_old_file_and_a_partial_that_is_cleaned(tmp_path) -> None:
    """A process writing half a file, then SIGKILLed: the target keeps its old bytes; the hidden temporary file it
    left is what ``remove_partial_files`` deletes."""
    path = tmp_path / 'epoch_1.pth'
    torch.save({'w': torch.ones(3)}, path)
    before = sha256(str(path))
    code = (
        'import sys, time; sys.path.insert(0, sys.argv[2]); from vispe.engine.atomic import atomic_open\n'
        "with atomic_open(sys.argv[1], 'wb') as f:\n"
        "    f.write(b'PK' * 1000); f.flush(); print('half', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, '-c', code, str(path), ROOT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == 'half'
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert sha256(str(path)) == before and read_checkpoint(str(path))['w'].sum() == 3
    partial = [p for p in os.listdir(tmp_path) if PARTIAL in p]
    assert len(partial) == 1 and partial[0].startswith('.epoch_1.pth')
    assert remove_partial_files(str(tmp_path)) and os.listdir(tmp_path) == ['epoch_1.pth']


def test_latest_checkpoint_skips_what_is_not_whole(tmp_path) -> None:
    assert latest_checkpoint(str(tmp_path)) is None
    for n in (1, 2, 3):
        torch.save({'n': n}, tmp_path / f'epoch_{n}.pth')
    data = (tmp_path / 'epoch_3.pth').read_bytes()
    (tmp_path / 'epoch_3.pth').write_bytes(data[: len(data) // 2])  # a truncated file (a non-atomic writer's)
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_3.pth'))
    assert not is_complete_checkpoint(str(tmp_path / 'epoch_3.pth'))
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'epoch_2.pth')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_1.pth'))
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'epoch_1.pth')  # the pointer wins when it is whole


# --- kill -9 and resume ------------------------------------------------------------------------------------------
def dropout_config(tmp_path) -> str:
    """The tiny ViT config with dropout and drop-path, so that a resumed run only matches when the random
    generators continue where they were."""
    base = tiny_config(tmp_path, epochs=EPOCHS, name='base.py')
    path = tmp_path / 'dropout.py'
    path.write_text(
        f"_base_ = ['{base}']\n"
        'model = dict(backbone=dict(drop_rate=0.1, drop_path_rate=0.1))\n'
        'randomness = dict(seed=0, deterministic=True)\n'
    )
    return str(path)


def train_cmd(config: str, work_dir, *extra: str) -> list:
    return [sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir), *extra]


def final_weights(work_dir) -> dict:
    return read_checkpoint(str(work_dir / f'epoch_{EPOCHS}.pth'))['state_dict']


def assert_resumable(work_dir) -> None:
    """What a killed run leaves: no pointer, or one naming a complete checkpoint; every epoch_N.pth whole."""
    pointer = work_dir / 'last_checkpoint'
    if pointer.exists():
        assert is_complete_checkpoint(pointer.read_text().strip()), pointer.read_text()
    for name in os.listdir(work_dir) if work_dir.exists() else []:
        if name.endswith('.pth'):
            assert is_complete_checkpoint(str(work_dir / name)), name


#: the tests that compare against it run on one xdist worker (make test's --dist loadgroup), so it runs once
KILL_9 = pytest.mark.xdist_group('kill_9')


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('uninterrupted')
    config = dropout_config(tmp)
    subprocess.run(train_cmd(config, tmp / 'work'), cwd=ROOT, check=True, capture_output=True, timeout=600)
    return config, final_weights(tmp / 'work')


def kill_when(proc: subprocess.Popen, marker: str, delay: float) -> bool:
    """Read the run's output until a line contains ``marker``, wait ``delay`` s, SIGKILL. False if it ended first."""
    for line in proc.stdout:
        if marker in line:
            time.sleep(delay)
            break
    else:
        proc.wait()
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


@pytest.mark.slow
@KILL_9
def test_kill_9_at_random_moments_then_resume_ends_bit_exact(uninterrupted, tmp_path) -> None:
    config, reference = uninterrupted
    work = tmp_path / 'work'
    rng = random.Random(0)
    # kill points: during start-up, right after a checkpoint began, in the middle of an epoch
    # (a tiny epoch takes ~20 ms, so the delays are drawn in milliseconds)
    markers = ['Checkpoints will be saved', 'Saving checkpoint at 1', 'Saving checkpoint at 2', 'Epoch(train) [3][1/2]']
    plan = [(marker, rng.uniform(0, 0.01)) for marker in markers]
    kills = 0
    for marker, delay in plan:
        resume = ['--resume'] if work.exists() else []  # --resume on a work dir that does not exist is refused
        proc = subprocess.Popen(
            train_cmd(config, work, *resume), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        kills += kill_when(proc, marker, delay)
        assert_resumable(work)
    assert kills >= 3, 'the runs ended before they could be killed: the test would prove nothing'
    proc = subprocess.run(train_cmd(config, work, '--resume'), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'Auto resumed' in proc.stdout + proc.stderr or 'resumed' in (proc.stdout + proc.stderr).lower()
    resumed = final_weights(work)
    assert resumed.keys() == reference.keys()
    different = [k for k in reference if not torch.equal(reference[k], resumed[k])]
    assert not different, f'resumed run differs from the uninterrupted one in {different[:5]}'


#: tools/train.py with a fault injected into the save of epoch 2: the process SIGKILLs itself at one exact point
KILL_AT = """
import os, runpy, signal, sys
import vispe.engine.atomic as ck
where = os.environ['VISPE_TEST_KILL_AT']
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
real_replace, real_write = os.replace, ck.atomic_write
def replace(src, dst):
    if where == 'checkpoint_rename' and str(dst).endswith('epoch_2.pth'):
        die()  # the temporary file is whole and fsynced; the rename never happens
    if where == 'pointer_rename' and str(dst).endswith('last_checkpoint') and 'epoch_2' in open(src).read():
        die()  # epoch_2.pth is in place; the pointer still names epoch_1.pth
    real_replace(src, dst)
def write(path, data, encoding='utf-8'):
    if where == 'checkpoint_write' and path.endswith('epoch_2.pth'):
        with open(ck.partial_path(path), 'wb') as f:
            f.write(data[: len(data) // 2]); f.flush(); os.fsync(f.fileno())
        die()  # half of the bytes in the temporary file
    real_write(path, data, encoding)
os.replace = replace
import vispe.engine.hooks as hooks; hooks.atomic_write = write
sys.argv = sys.argv[1:]
runpy.run_path('tools/train.py', run_name='__main__')
"""


@pytest.mark.slow
@KILL_9
@pytest.mark.parametrize('where', ['checkpoint_write', 'checkpoint_rename', 'pointer_rename'])
def test_kill_9_at_each_step_of_a_checkpoint_save_then_resume_ends_bit_exact(uninterrupted, tmp_path, where) -> None:
    """The run SIGKILLs itself, deterministically, inside the write of epoch_2.pth, between its complete temporary
    file and the rename, or between that rename and the pointer's: the pointer always names a complete checkpoint,
    nothing half written carries a checkpoint's name, and --resume finishes bit-identical to the uninterrupted run."""
    config, reference = uninterrupted
    work = tmp_path / 'work'
    env = {**os.environ, 'PYTHONPATH': ROOT, 'VISPE_TEST_KILL_AT': where}
    proc = subprocess.run(
        [sys.executable, '-c', KILL_AT, *train_cmd(config, work)[1:]], cwd=ROOT, env=env, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert_resumable(work)
    assert (work / 'last_checkpoint').read_text().strip().endswith('epoch_1.pth')
    partial = [n for n in os.listdir(work) if PARTIAL in n]
    if where == 'pointer_rename':
        assert is_complete_checkpoint(str(work / 'epoch_2.pth'))
        assert len(partial) == 1 and partial[0].startswith('.last_checkpoint')
    else:
        assert not (work / 'epoch_2.pth').exists() and partial and partial[0].startswith('.epoch_2.pth')
    assert latest_checkpoint(str(work)).endswith('epoch_1.pth')
    resumed = subprocess.run(train_cmd(config, work, '--resume'), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert 'resumed epoch: 1' in resumed.stdout + resumed.stderr
    assert not any(PARTIAL in n for n in os.listdir(work)), 'the next save removes what the killed writer left'
    final = final_weights(work)
    assert all(torch.equal(reference[k], final[k]) for k in reference)


@pytest.mark.slow
@pytest.mark.xdist_group('ddp')
def test_kill_9_of_a_ddp_run_then_resume_ends_bit_exact(ddp_run, tmp_path) -> None:
    """torchrun with 2 processes: the whole process group is SIGKILLed just after the epoch-2 checkpoint began.
    Rank 0 alone writes, atomically; ``--resume`` under torchrun finishes, does not train the saved epochs again, and
    ends equal to an uninterrupted DDP run. (No dropout here: RNGStateHook restores states only in single-process
    runs, since a checkpoint holds rank 0's; the data order comes from the sampler's seed and epoch.)"""
    config, whole, _ = ddp_run  # the uninterrupted run: DDP_EPOCHS (= EPOCHS) epochs of 2 iterations
    work = tmp_path / 'work'
    proc = subprocess.Popen(
        torchrun_cmd(config, work),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill takes torchrun and both ranks at once
    )
    for line in proc.stdout:
        if 'Saving checkpoint at 2 epochs' in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, 'the run ended before it could be killed: the test would prove nothing'
    assert_resumable(work)
    assert latest_checkpoint(str(work)).endswith(('epoch_1.pth', 'epoch_2.pth'))
    resumed = subprocess.run(
        torchrun_cmd(config, work, '--resume'), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log[-3000:]
    assert 'Distributed training: True' in log and 'resumed epoch' in log
    assert 'Epoch(train) [1]' not in log, 'a saved epoch was trained again'
    reference = read_checkpoint(str(whole / f'epoch_{EPOCHS}.pth'))['state_dict']
    final = final_weights(work)
    different = [k for k in reference if not torch.equal(reference[k], final[k])]
    assert not different, f'resumed DDP run differs from the uninterrupted one in {different[:5]}'


DIT_CONFIG = os.path.join(ROOT, 'configs/dit/dit_tiny_rope_axial_rpe2d_shapes2d.py')


class StopBefore:
    """A hook that interrupts training just before iteration ``at`` (0-based), as a kill after a save would."""

    priority = 'VERY_HIGH'

    def __init__(self, at: int) -> None:
        self.at = at

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if runner.iter == self.at:
            raise KeyboardInterrupt(f'interrupted before iteration {self.at}')


@pytest.mark.slow
def test_iteration_based_dit_resumes_bit_exact(tmp_path) -> None:
    """The iteration-based loop (InfiniteSampler, mmengine skips the consumed batches on resume) with everything
    random the DiT run draws: diffusion times and noise, label dropout, rpe2d positions, random crops, and the EMA
    copy. Stopped after the checkpoint at iteration 3, resumed: the online and EMA weights at iteration 6 equal an
    uninterrupted run's bit for bit, and without RNGStateHook they do not (so the check can fail)."""
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    from vispe.engine.config import load_config, without_validation

    config = tmp_path / 'dit.py'
    config.write_text(
        f"_base_ = ['{DIT_CONFIG}']\n"
        'model = dict(backbone=dict(depth=2, embed_dim=32, num_heads=2))\n'
        'train_dataloader = dict(batch_size=4, dataset=dict(num_samples=16))\n'
        'train_cfg = dict(max_iters=6)\n'
        'randomness = dict(seed=0, deterministic=True)\n'
        'default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=3, max_keep_ckpts=3))\n'
    )

    def train(work, stop_at=None, resume=False, rng_state=True):
        options = None if rng_state else {'default_hooks.rng_state': None}  # switched off as a user would
        cfg = without_validation(load_config(str(config), options, work_dir=str(work)))
        if resume:  # what tools/train.py --resume does
            cfg.resume, cfg.load_from = True, latest_checkpoint(str(work))
        runner = Runner.from_cfg(cfg)
        if stop_at is not None:
            runner.register_hook(type('Stop', (StopBefore, Hook), {})(at=stop_at))
            with pytest.raises(KeyboardInterrupt):
                runner.train()
        else:
            runner.train()
        return read_checkpoint(str(work / 'iter_6.pth')) if stop_at is None else None

    reference = train(tmp_path / 'whole')
    for rng_state in (True, False):
        work = tmp_path / f'resumed_rng_{rng_state}'
        train(work, stop_at=4)
        assert latest_checkpoint(str(work)).endswith('iter_3.pth')
        resumed = train(work, resume=True, rng_state=rng_state)
        for key in ('state_dict', 'ema_state_dict'):
            same = [torch.equal(reference[key][k], resumed[key][k]) for k in reference[key]]
            assert all(same) if rng_state else not all(same), (key, rng_state, sum(same), len(same))


# --- non-finite loss ---------------------------------------------------------------------------------------------
class PoisonAt:
    """A hook that turns the classifier's weights to NaN just before iteration ``at`` (1-based)."""

    priority = 'NORMAL'

    def __init__(self, at: int) -> None:
        self.at = at

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if runner.iter + 1 == self.at:
            with torch.no_grad():
                runner.model.backbone.head.weight.fill_(float('nan'))


def test_nan_loss_stops_and_names_the_iteration_and_last_good_checkpoint(tmp_path) -> None:
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    from vispe.engine.config import load_config
    from vispe.engine.hooks import NonFiniteLossError

    cfg = load_config(tiny_config(tmp_path, epochs=3), work_dir=str(tmp_path / 'work'))
    runner = Runner.from_cfg(cfg)
    runner.register_hook(type('Poison', (PoisonAt, Hook), {})(at=5))  # epoch 3, first batch
    with pytest.raises(NonFiniteLossError) as err:
        runner.train()
    message = str(err.value)
    last = str(tmp_path / 'work' / 'epoch_2.pth')
    assert 'loss = nan at iteration 5 (epoch 3, batch 1)' in message and f'last good checkpoint is {last}' in message
    assert not (tmp_path / 'work' / 'epoch_3.pth').exists(), 'the diverged weights must not be saved'
    state = read_checkpoint(last)['state_dict']
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert (tmp_path / 'work' / 'last_checkpoint').read_text().strip() == last


def test_train_tool_exits_with_the_message_on_divergence(tmp_path) -> None:
    """tools/train.py: an absurd learning rate makes the loss Inf / NaN; the tool exits 1 with one line naming the
    iteration, no traceback."""
    config = tiny_config(tmp_path, epochs=3)
    proc = subprocess.run(
        [*train_cmd(config, tmp_path / 'work'), '--cfg-options', 'optim_wrapper.optimizer.lr=1e30'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr
    assert 'error: training stopped: loss = ' in proc.stderr and ' at iteration ' in proc.stderr
