"""Runner vs plain-loop training throughput (vispe/bench/throughput.py) on a tiny config: the report's
arithmetic and bookkeeping, and that both loops train the same model. No timing thresholds."""

import statistics

import pytest
import torch
from test_tools import tiny_config

from vispe.bench.reports import print_throughput
from vispe.bench.throughput import prepare_config, run_plain_loop, run_runner, runner_vs_loop
from workbench.targets import THROUGHPUT_TARGET as TARGET

WARMUP, ITERS = 1, 3


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    """2 blocks of width 32, 32 px, 16 images in batches of 8: runs cross epoch ends."""
    return tiny_config(tmp_path_factory.mktemp('throughput'), encoding='rope_mixed', samples=16)


@pytest.fixture(scope='module')
def report(config):
    return runner_vs_loop(config, iters=ITERS, warmup=WARMUP, rounds=2, device='cpu', target=TARGET)


def test_report_figures(report):
    assert report['batch_size'] == 8 and report['rounds'] == 2 and report['device'] == 'cpu'
    assert (report['iters'], report['warmup'], report['amp'], report['compile']) == (ITERS, WARMUP, False, False)
    for name in ('runner', 'plain'):
        loop = report['loops'][name]
        per_round = loop['rounds_images_per_s']
        assert len(per_round) == 2 and all(v > 0 for v in per_round)
        assert loop['images_per_s'] == {
            'median': statistics.median(per_round),
            'min': min(per_round),
            'max': max(per_round),
        }
        assert loop['iterations'] == [WARMUP + ITERS] * 2
        assert [len(ms) for ms in loop['iter_ms']] == [ITERS] * 2
        # images/s is the timed iterations' images over the sum of their times
        for ips, ms in zip(per_round, loop['iter_ms']):
            assert ips == pytest.approx(ITERS * 8 / (sum(ms) / 1e3), rel=1e-6)
    ratio = report['loops']['plain']['images_per_s']['median'] / report['loops']['runner']['images_per_s']['median']
    assert report['ratio'] == pytest.approx(ratio)
    assert report['target'] == TARGET == 1.05 and report['met'] == (report['ratio'] <= TARGET)


def test_print_throughput(report, capsys):
    print_throughput(report)
    out = capsys.readouterr().out
    assert 'mmengine Runner' in out and 'plain PyTorch loop' in out and 'batch=8' in out
    assert f'ratio plain / runner = {report["ratio"]:.3f}' in out
    assert ('NOT met' in out) == (not report['met'])
    # the verdict follows the ratio, not the other way round
    print_throughput({**report, 'ratio': 1.2, 'met': False})
    assert 'NOT met' in capsys.readouterr().out
    print_throughput({**report, 'target': None, 'met': None})  # no target given: the ratio, not judged
    assert 'met' not in capsys.readouterr().out


def test_both_loops_train_the_same_model(config):
    """Same seed, init order, data order and optimizer: identical start, identical updates (ConstantLR 1.0)."""
    cfg = prepare_config(config, iters=4, warmup=2)
    runner = run_runner(cfg, 2, 4, device='cpu', keep_state=True)
    plain = run_plain_loop(cfg, 2, 4, device='cpu', keep_state=True)
    assert runner.iterations == plain.iterations == 6
    assert runner.images == plain.images == 4 * 8
    assert runner.initial.keys() == plain.initial.keys()
    for key in runner.initial:
        assert torch.equal(runner.initial[key], plain.initial[key]), f'{key} starts apart'
    for run in (runner, plain):
        changed = [k for k in run.initial if not torch.equal(run.initial[k], run.final[k])]
        assert any('qkv' in k for k in changed) and any('head' in k for k in changed), f'{run.name} did not train'
    for key in runner.final:
        torch.testing.assert_close(plain.final[key], runner.final[key], rtol=1e-5, atol=1e-6, msg=key)


def test_prepared_config_keeps_the_runner_as_used(config):
    cfg = prepare_config(config, iters=7, warmup=3)
    assert cfg.train_cfg == dict(type='IterBasedTrainLoop', max_iters=10, val_interval=11)
    assert cfg.val_dataloader is None and cfg.val_cfg is None and cfg.val_evaluator is None
    assert cfg.train_dataloader.sampler == dict(type='InfiniteSampler', shuffle=True)
    assert {'timer', 'logger', 'param_scheduler', 'checkpoint'} <= set(cfg.default_hooks)
    assert cfg.default_hooks.logger.interval == 1  # the config's, not changed
    assert cfg.default_hooks.checkpoint.interval == -1 and cfg.default_hooks.checkpoint.save_last is False
    assert cfg.log_level == 'WARNING' and cfg.randomness.seed == 0
    with pytest.raises(ValueError, match='iters must be >= 1'):
        prepare_config(config, iters=0, warmup=1)


def test_amp_on_cpu(config):
    report = runner_vs_loop(config, iters=2, warmup=1, rounds=1, amp=True, device='cpu')
    assert report['amp'] is True
    assert report['loops']['runner']['iterations'] == report['loops']['plain']['iterations'] == [3]
    assert all(report['loops'][n]['images_per_s']['median'] > 0 for n in ('runner', 'plain'))
    # both run the forward in bf16: they agree with each other, and not with a float32 run
    cfg = prepare_config(config, iters=2, warmup=1)
    runner = run_runner(cfg, 1, 2, device='cpu', amp=True, keep_state=True)
    plain = run_plain_loop(cfg, 1, 2, device='cpu', amp=True, keep_state=True)
    fp32 = run_plain_loop(cfg, 1, 2, device='cpu', keep_state=True)
    key = 'backbone.blocks.0.attn.qkv.weight'
    torch.testing.assert_close(plain.final[key], runner.final[key], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(plain.final[key], fp32.final[key], rtol=1e-5, atol=1e-6)
