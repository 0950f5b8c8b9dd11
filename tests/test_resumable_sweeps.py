"""Evaluation sweeps that keep what they finished: results.json written cell by cell, reruns that reuse finished
cells (--force recomputes), refusal of another checkpoint's or config's results, out-of-memory cells retried at half
the batch size and recorded as failed at 1, Ctrl-C; and the training resolution read from what the model trained on.

Faults are injected (a test_step that raises when the batch is too large), never provoked for real."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch
from mmengine.model import BaseModel
from mmengine.registry import init_default_scope
from test_tools import run_tool, tiny_config

from vispe.engine.config import load_config
from vispe.evaluation.trained_model import train_resolution
from vispe.registry import MODELS
from vispe.sweeps import engine as E
from vispe.sweeps import resolution as R
from vispe.sweeps.identity import file_sha256
from vispe.tasks.classification import ImageClassifier

CPU_OOM = "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate"


def save_model(cfg, path, seed: int = 0) -> str:
    """An untrained model of ``cfg`` as a checkpoint (evaluating it is what these tests need, not accuracy)."""
    init_default_scope('vispe')
    torch.manual_seed(seed)
    torch.save({'state_dict': MODELS.build(cfg.model).state_dict()}, path)
    return str(path)


@pytest.fixture
def setup(tmp_path):
    """(config with 32 test images at batch 16, checkpoint, output folder)."""
    cfg = load_config(tiny_config(tmp_path))
    return cfg, save_model(cfg, tmp_path / 'model.pth'), str(tmp_path / 'eval')


@pytest.fixture
def calls(monkeypatch):
    """Every test_step of an ImageClassifier as (image side, batch size); ``calls.fail`` = (test, exception) makes
    the batches for which test(side, batch) holds raise the exception, ``calls.stop`` = side raises
    KeyboardInterrupt at the first batch of that side."""
    seen = SimpleNamespace(log=[], fail=None, stop=None)

    def test_step(self, data):
        side, batch = data['inputs'].shape[-1], len(data['inputs'])
        seen.log.append((side, batch))
        if seen.stop == side:
            raise KeyboardInterrupt
        if seen.fail is not None and seen.fail[0](side, batch):
            raise seen.fail[1]
        return BaseModel.test_step(self, data)

    monkeypatch.setattr(ImageClassifier, 'test_step', test_step)
    return seen


def sweep(setup, **kwargs):
    cfg, ckpt, out = setup
    kwargs = dict(dict(strategies=['bicubic'], device='cpu', show_progress=False, out_dir=out), **kwargs)
    return R.sweep(kwargs.pop('cfg', cfg), kwargs.pop('ckpt', ckpt), kwargs.pop('resolutions', [32, 48]), **kwargs)


def on_disk(setup) -> dict:
    with open(os.path.join(setup[2], E.RESULTS)) as f:
        return json.load(f)


def test_ctrl_c_keeps_the_finished_cells_and_a_rerun_does_not_recompute_them(setup, calls):
    calls.stop = 48
    with pytest.raises(KeyboardInterrupt):
        sweep(setup)
    saved = on_disk(setup)  # nothing was on disk before the sweep ended
    assert [(r['resolution'], r['strategy']) for r in saved['results']] == [(32, 'bicubic')]
    assert saved['complete'] is False and saved['failed'] == []
    calls.stop, calls.log = None, []
    logged = []
    results = sweep(setup, log=logged.append)
    assert {side for side, _ in calls.log} == {48}, 'the finished 32 px cell was evaluated again'
    assert any('reusing 1 of 2 finished cells' in line for line in logged)
    assert results['complete'] and [r['resolution'] for r in results['results']] == [32, 48]
    assert results['results'][0] == saved['results'][0]
    assert on_disk(setup)['results'] == results['results']


def test_rerun_reuses_every_cell_and_force_recomputes_them(setup, calls):
    first = sweep(setup)
    calls.log = []
    logged = []
    assert sweep(setup, log=logged.append)['results'] == first['results']
    assert calls.log == [] and any('reusing 2 of 2' in line for line in logged)
    again = sweep(setup, force=True)
    assert {side for side, _ in calls.log} == {32, 48} and again['results'] == first['results']


def test_a_rerun_at_other_resolutions_keeps_the_cells_it_did_not_ask_for(setup, calls):
    sweep(setup, resolutions=[32, 48])
    calls.log = []
    only = sweep(setup, resolutions=[48])
    assert calls.log == [] and [r['resolution'] for r in only['results']] == [48]
    assert [r['resolution'] for r in on_disk(setup)['other_rows']] == [32]  # kept for a later run
    sweep(setup, resolutions=[32, 48])
    assert calls.log == []


def test_results_of_another_checkpoint_or_config_are_refused_and_left(setup, tmp_path):
    cfg, ckpt, out = setup
    sweep(setup)
    before = on_disk(setup)
    other = save_model(cfg, tmp_path / 'other.pth', seed=1)
    with pytest.raises(E.SweepConflict, match=r'another checkpoint \(model.pth, sha256 .*--force'):
        sweep(setup, ckpt=other)
    changed = load_config(tiny_config(tmp_path), {'test_dataloader.dataset.seed': 1})
    with pytest.raises(E.SweepConflict, match=r'another config \(test_dataloader.dataset.seed: 0, now 1\)'):
        sweep(setup, cfg=changed)
    assert on_disk(setup) == before
    replaced = sweep(setup, ckpt=other, force=True)
    assert replaced['checkpoint_sha256'] == file_sha256(other) != before['checkpoint_sha256']
    # runtime-only keys (hooks, logging) change no evaluation: not a conflict
    sweep(setup, ckpt=other, cfg=load_config(tiny_config(tmp_path), {'default_hooks.logger.interval': 7}))


def test_a_results_file_without_identity_is_refused(setup):
    _, _, out = setup
    os.makedirs(out)
    legacy = {'config': 'x.py', 'checkpoint': 'x.pth', 'metric': 'accuracy', 'results': []}
    with open(os.path.join(out, E.RESULTS), 'w') as f:
        json.dump(legacy, f)
    with pytest.raises(E.SweepConflict, match='older vispe.*--force'):
        sweep(setup)
    assert on_disk(setup) == legacy


@pytest.mark.parametrize(
    'error',
    [torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 34.00 GiB'), RuntimeError(CPU_OOM)],
    ids=['cuda', 'cpu-allocator'],
)
def test_out_of_memory_halves_the_batch_and_gives_the_same_number(setup, calls, error):
    expected = sweep(setup, out_dir=None)['results']
    calls.log, calls.fail = [], (lambda side, batch: side == 48 and batch > 4, error)
    logged = []
    results = sweep(setup, log=logged.append)
    assert [r['value'] for r in results['results']] == [r['value'] for r in expected]
    assert 'batch_size' not in results['results'][0] and results['results'][1]['batch_size'] == 4
    assert sorted({b for side, b in calls.log if side == 48}) == [4, 8, 16]  # 16 -> 8 -> 4, each retried once
    assert any('out of memory at batch size 16' in line and 'retrying at batch size 8' in line for line in logged)


def test_a_cell_out_of_memory_at_batch_1_is_recorded_and_the_sweep_goes_on(setup, calls):
    calls.fail = (lambda side, batch: side == 48, RuntimeError(CPU_OOM))
    results = sweep(setup, resolutions=[48, 64])
    assert [r['resolution'] for r in results['results']] == [64]  # the next cell ran
    (failed,) = results['failed']
    assert failed['resolution'] == 48 and failed['strategy'] == 'bicubic'
    assert failed['error'].startswith('out of memory at batch size 1: [enforce fail') and not results['complete']
    assert on_disk(setup)['failed'] == [failed]
    assert [b for side, b in calls.log if side == 48] == [16, 8, 4, 2, 1]
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(R.results_table(results['results'], failed=results['failed']))
    assert 'failed' in console.export_text()
    assert 'did not fit in memory' in E.failure_message(results, setup[2])
    calls.fail, calls.log = None, []
    assert sweep(setup, resolutions=[48, 64])['complete']  # a rerun retries the failed cell only
    assert {side for side, _ in calls.log} == {48}


def test_other_errors_are_not_taken_for_out_of_memory(setup, calls):
    calls.fail = (lambda side, batch: side == 48, RuntimeError('mat1 and mat2 shapes cannot be multiplied'))
    with pytest.raises(RuntimeError, match='shapes cannot be multiplied'):
        sweep(setup)
    assert [b for side, b in calls.log if side == 48] == [16]
    assert E.is_out_of_memory(MemoryError()) and not E.is_out_of_memory(ValueError('out of memory'))


def test_cells_of_every_kind_go_through_one_engine():
    """The engine alone, with cells that fail above a batch size: the retry and failure bookkeeping the four
    sweeps share."""
    tried = []

    def cell(name, limit):
        def run(batch):
            tried.append((name, batch))
            if batch > limit:
                raise torch.OutOfMemoryError('CUDA out of memory')
            return [{'setting': name, 'value': float(batch)}]

        return E.Cell(name, {'setting': name}, run, batch_size=6)

    identity = {'sweep': 'test', 'checkpoint_sha256': 'a', 'config_sha256': 'b', 'resolved_config': {}}
    doc = E.run_sweep([cell('a', 6), cell('b', 2), cell('c', 0)], {}, identity, show_progress=False, log=print)
    assert [(r['setting'], r['value']) for r in doc['results']] == [('a', 6.0), ('b', 1.0)]
    assert doc['results'][1]['batch_size'] == 1 and [f['setting'] for f in doc['failed']] == ['c']
    assert [b for n, b in tried if n == 'b'] == [6, 3, 1]


@pytest.mark.slow
def test_eval_resolution_tool_resumes_refuses_and_forces(setup, tmp_path):
    """The tool on a folder the same sweep finished (in process here: the start-up of a tool is a few seconds)
    reuses its cell; another checkpoint's results are refused in one line, and --force replaces them."""
    cfg, ckpt, out = setup
    sweep(setup, resolutions=[32])
    args = ['tools/eval_resolution.py', cfg.filename, ckpt, '--resolutions', '32', '--strategy', 'bicubic']
    again = run_tool(*args, '--out', out, '--no-progress')
    assert 'reusing 1 of 1 finished cells' in again.stdout and 'results.json' in again.stdout
    other = save_model(cfg, tmp_path / 'other.pth', seed=1)
    refused = run_tool(*[other if a == ckpt else a for a in args], '--out', out, check=False)
    assert refused.returncode == 1 and 'error:' in refused.stderr and 'another checkpoint' in refused.stderr
    assert 'Traceback' not in refused.stderr
    forced = run_tool(*[other if a == ckpt else a for a in args], '--out', out, '--force', '--no-progress')
    assert 'reusing' not in forced.stdout and on_disk(setup)['checkpoint_sha256'] == file_sha256(other)


# ------------------------------------------------------------------------------------------------------------------
# item 7a: the training resolution (and point count) is what the model was trained on
# ------------------------------------------------------------------------------------------------------------------


def test_train_resolution_follows_the_data_set_not_the_base_configs_helper(tmp_path):
    cfg = load_config(tiny_config(tmp_path), {'train_dataloader.dataset.image_size': 28})
    assert cfg.train_resolution == 32  # the shapes2d base config's helper variable, left behind
    assert train_resolution(cfg) == 28
    assert train_resolution(cfg, {'train_resolution': 24}) == 24  # the checkpoint's meta wins


def test_train_points_follows_the_data_set_not_the_base_configs_helper(tmp_path):
    from vispe.sweeps.points import train_points

    cfg = load_config('configs/point/point_tiny_rope3d_primitives3d.py', {'train_dataloader.dataset.num_points': 256})
    assert cfg.train_points == 512 and train_points(cfg) == 256
    assert train_points(cfg, {'train_points': 128}) == 128


def test_run_meta_hook_records_what_the_model_trains_on():
    from mmengine.config import Config

    from vispe.datasets.transforms import TransformedDataset
    from vispe.engine.config_record import RECORD_KEY, config_from_record
    from vispe.engine.run_meta import RunMetaHook

    def saved(dataset) -> dict:
        cfg = Config(dict(model=dict(type='ImageClassifier')))
        runner = SimpleNamespace(cfg=cfg, _train_loop=SimpleNamespace(dataloader=SimpleNamespace(dataset=dataset)))
        checkpoint = {'meta': {'epoch': 1}}
        RunMetaHook().before_save_checkpoint(runner, checkpoint)
        assert config_from_record(checkpoint['meta'].pop(RECORD_KEY)).model == cfg.model  # the config, as data
        return checkpoint['meta']

    assert saved(SimpleNamespace(image_size=(28, 28))) == {'epoch': 1, 'train_resolution': 28}
    assert saved(SimpleNamespace(image_size=(24, 32)))['train_resolution'] == (24, 32)
    assert saved(SimpleNamespace(num_points=300))['train_points'] == 300
    crop = SimpleNamespace(size=16)
    wrapped = TransformedDataset(SimpleNamespace(image_size=(64, 64), metainfo={}), [crop])
    assert saved(wrapped)['train_resolution'] == 16  # the crop is what the model sees


def test_a_checkpoint_trained_at_28_px_is_reported_at_28(tmp_path):
    from conftest import train_in_process

    from vispe.engine.checkpoint import read_checkpoint

    config = tiny_config(tmp_path, samples=8)
    path = tmp_path / 'at28.py'
    path.write_text(open(config).read() + 'train_dataloader = dict(dataset=dict(image_size=28))\n')
    cfg = load_config(str(path))
    assert 'run_meta' in cfg.default_hooks
    _, ckpt, _, _ = train_in_process(str(path), str(tmp_path / 'work'))
    assert read_checkpoint(ckpt)['meta']['train_resolution'] == 28
    # evaluated with the unmodified config (train_resolution 32, image_size 32): the checkpoint knows better
    results = R.sweep(load_config(config), ckpt, [32], ['bicubic'], 'cpu', show_progress=False)
    assert results['train_resolution'] == 28


def test_callers_that_own_the_folder_replace_only_stale_results(tmp_path):
    """compare / the leaderboard / the DiT demo pass --force for results older than the checkpoint they evaluate
    (a retrained run) or without identity; an interrupted sweep of the same training is resumed (the engine reuses
    its finished cells where nothing they depend on changed)."""
    ckpt, path = tmp_path / 'epoch_3.pth', tmp_path / E.RESULTS
    ckpt.write_bytes(b'x')
    assert E.replace_args(str(tmp_path), str(ckpt)) == []  # nothing there yet
    rows = [{'encoding': 'a', 'strategy': 's', 'resolution': 32, 'value': 1.0}]
    doc = {'checkpoint': str(ckpt), 'checkpoint_sha256': 'x', 'results': rows, 'complete': False}
    path.write_text(json.dumps(doc))
    assert E.replace_args(str(tmp_path), str(ckpt)) == []  # same training: resume it
    later = os.path.getmtime(path) + 10
    os.utime(ckpt, (later, later))  # retrained after the evaluation
    assert E.replace_args(str(tmp_path), str(ckpt)) == ['--force']
    path.write_text(json.dumps({'checkpoint': str(ckpt), 'results': rows}))  # an older vispe's file, newer
    os.utime(path, (later + 1, later + 1))
    assert E.replace_args(str(tmp_path), str(ckpt)) == ['--force']
