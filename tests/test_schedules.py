"""Learning-rate schedules follow the run's length: ``--cfg-options train_cfg.max_epochs=N`` (as
docs/guide/training.md shows) gives a cosine decay that reaches its floor at epoch N, and a scheduler set for a
longer run is refused."""

from __future__ import annotations

import math
import os

import pytest
from conftest import ROOT

from vispe.engine.config import ConfigError, load_config, without_validation
from vispe.engine.runner import VispeRunner

#: every config with a schedule of its own that decays (the others inherit one of these)
DECAYING = [
    'configs/vit/vit_tiny_ape_learned_shapes2d_position.py',
    'configs/point/point_tiny_primitives3d.py',
    'configs/camera/multiview_tiny_scenes.py',
]
#: tiny data: 4 iterations an epoch
TINY = {'train_dataloader.batch_size': 4, 'train_dataloader.dataset.num_samples': 16}


def shortened(config: str, work, epochs: int, **extra) -> VispeRunner:
    options = {**TINY, 'train_cfg.max_epochs': epochs, **extra}
    return VispeRunner.from_cfg(without_validation(load_config(os.path.join(ROOT, config), options, str(work))))


def step_through(runner: VispeRunner) -> list:
    """Build the run's loop, optimizer and schedulers as ``train()`` does and step them over every iteration of
    the run (no forward pass); returns the learning rate used at each iteration, then the one after the last."""
    runner._train_loop = runner.build_train_loop(runner._train_loop)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    schedulers = runner.build_param_scheduler(runner.param_schedulers)
    lrs = []
    for _ in range(runner.max_iters):
        lrs.append(runner.optim_wrapper.get_lr()['lr'][0])
        runner.optim_wrapper.step()  # no gradients: the weights stay; the schedulers expect it first
        for scheduler in schedulers:
            scheduler.step()
    return lrs + [runner.optim_wrapper.get_lr()['lr'][0]]


@pytest.mark.parametrize('config', DECAYING)
def test_a_shortened_run_decays_over_its_own_length(config, tmp_path) -> None:
    """Before: the cosine ended at the config's epoch 30 (20, 12), so a 3-epoch run kept 99% of its peak rate.
    Now: one warm-up epoch, then the cosine from the peak to eta_min over exactly the run's remaining iterations
    (mmengine's closed form with T_max = the run's last iteration - the warm-up's)."""
    runner = shortened(config, tmp_path, epochs=3)
    assert runner.max_iters == 12
    lrs = step_through(runner)[:12]
    peak, floor = load_config(os.path.join(ROOT, config)).optim_wrapper.optimizer.lr, 1e-5
    cosine = [floor + (peak - floor) * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(8)]
    assert lrs[3] == pytest.approx(peak) and lrs[4:] == pytest.approx(cosine, rel=1e-6)
    assert lrs[-1] < 0.05 * peak, 'the last iteration trains at a decayed rate'


def test_shortened_training_reads_a_decayed_rate_at_its_last_iteration(tmp_path) -> None:
    """The same through a real 3-epoch training run of the ViT config (the Runner's own scheduler hook)."""
    config = 'configs/vit/vit_tiny_ape_learned_shapes2d_position.py'
    model = {'model.backbone.depth': 1, 'model.backbone.embed_dim': 32, 'model.backbone.num_heads': 2}
    runner = shortened(config, tmp_path, epochs=3, **model)
    runner.train()
    lrs = runner.message_hub.get_scalar('train/lr').data[0]
    assert len(lrs) == 12 and lrs[-1] < 0.05 * max(lrs)


def test_a_scheduler_set_for_a_longer_run_is_refused(tmp_path) -> None:
    config = 'configs/vit/vit_tiny_ape_learned_shapes2d_position.py'
    runner = shortened(config, tmp_path, epochs=3, **{'param_scheduler.1.end': 30})
    with pytest.raises(ConfigError, match=r"param_scheduler\[1\] \(CosineAnnealingLR\) ends at iteration 120 "
                       r"\(epoch 30\), after the run's last iteration \(12\).*param_scheduler.1.end"):  # fmt: skip
        step_through(runner)
    fits = step_through(shortened(config, tmp_path / 'fits', epochs=3, **{'param_scheduler.1.end': 3}))
    assert fits[-1] < 0.05 * max(fits)


def test_a_run_shorter_than_its_schedule_trains_and_says_what_changed(tmp_path, monkeypatch) -> None:
    """Before: ``train_cfg.max_epochs=1`` stopped with mmengine's 'end should be larger than begin, begin=94, end=94'
    (the cosine after the one-epoch warm-up had no room). Now the run trains its warm-up and the log says the cosine
    was left out; a warm-up longer than the run is clipped to it, on the same ramp, and said so."""
    config = 'configs/vit/vit_tiny_ape_learned_shapes2d_position.py'
    peak = load_config(os.path.join(ROOT, config)).optim_wrapper.optimizer.lr
    runner = shortened(config, tmp_path, epochs=1)
    said: list[str] = []
    monkeypatch.setattr(runner.logger, 'warning', said.append)
    lrs = step_through(runner)
    assert len(lrs) == 5 and lrs[:4] == pytest.approx([peak * (0.01 + 0.99 * t / 3) for t in range(4)])  # mmengine's
    assert said == [
        'param_scheduler[1] (CosineAnnealingLR) begins at epoch 1, where this 1-epoch run has ended: left out (the '
        'run ends before it starts)'
    ]
    runner = shortened(config, tmp_path / 'longer', epochs=1, **{'param_scheduler.0.end': 2})
    said.clear()
    monkeypatch.setattr(runner.logger, 'warning', said.append)
    lrs = step_through(runner)
    assert lrs[:4] == pytest.approx([peak * (0.01 + 0.99 * t / 7) for t in range(4)])  # the 2-epoch ramp, cut at 1
    assert 'param_scheduler[0] (LinearLR) is a warm-up to epoch 2, longer than this 1-epoch run: clipped' in said[0]
    assert 'reaches 0.434 of the base rate' in said[0]


def test_a_one_epoch_training_run_finishes(tmp_path) -> None:
    """The issue's case end to end: the tool's Runner trains one epoch of the default schedule."""
    config = 'configs/vit/vit_tiny_ape_learned_shapes2d_position.py'
    model = {'model.backbone.depth': 1, 'model.backbone.embed_dim': 32, 'model.backbone.num_heads': 2}
    # its own experiment name: mmengine keys the message hub by it (config name + second), and the 3-epoch run above
    # of the same config in the same second would share its learning-rate history
    runner = shortened(config, tmp_path, epochs=1, experiment_name='one_epoch_run', **model)
    runner.train()
    lrs = list(runner.message_hub.get_scalar('train/lr').data[0])
    assert len(lrs) == 4 and lrs == sorted(lrs) and lrs[0] < 0.05 * lrs[-1]  # the warm-up's rising rate
