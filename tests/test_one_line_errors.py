"""Mistakes a user makes in a config, on a command line or in a forward pass are one line naming the problem and the
fix, not a traceback from deep inside mmengine or torch (issue 38, "tracebacks where one line belongs")."""

from __future__ import annotations

import glob
import os

import pytest
from conftest import ROOT

from vispe.engine.config import ConfigError, load_config

TINY = 'configs/vit/vit_tiny_shapes2d_position.py'
DIT = 'configs/dit/dit_tiny_shapes2d.py'
SHIPPED = [c for c in sorted(glob.glob(os.path.join(ROOT, 'configs', '*', '*.py'))) if '_base_' not in c]


def one_line(text: str) -> str:
    assert 'Traceback' not in text and text.count('\n') <= 1, text[-3000:]
    return text.strip()


# --- 1. misspelled keys of the sections mmengine builds ---------------------------------------------------------------
@pytest.mark.parametrize('path', SHIPPED, ids=[os.path.basename(c) for c in SHIPPED])
def test_every_shipped_config_passes_the_section_key_check(path) -> None:
    load_config(path)


@pytest.mark.parametrize(
    'config, option, needles',
    [
        (TINY, 'train_cfg.max_epoch', ['train_cfg.max_epoch', 'EpochBasedTrainLoop', "did you mean 'max_epochs'"]),
        (TINY, 'optim_wrapper.optimizer.lrr', ['optim_wrapper.optimizer.lrr', 'AdamW', "did you mean 'lr'"]),
        (TINY, 'optim_wrapper.clip_gard', ['optim_wrapper.clip_gard', 'OptimWrapper', "did you mean 'clip_grad'"]),
        (TINY, 'train_dataloader.batch_sise', ['train_dataloader.batch_sise', "did you mean 'batch_size'"]),
        (TINY, 'val_dataloader.dataset.num_sample', ['Shapes2D', "did you mean 'num_samples'"]),
        (TINY, 'train_dataloader.sampler.shufle', ['DefaultSampler', "did you mean 'shuffle'"]),
        (TINY, 'randomness.sed', ['randomness.sed', 'Runner.set_randomness', "did you mean 'seed'"]),
        (TINY, 'param_scheduler.0.ends', ['param_scheduler[0].ends', 'LinearLR', "did you mean 'end'"]),
        (TINY, 'log_processor.window', ['LogProcessor', "did you mean 'window_size'"]),
        (TINY, 'default_hooks.checkpoint.intervall', ['AtomicCheckpointHook', "did you mean 'interval'"]),
        (TINY, 'default_hooks.logger.intervall', ['default_hooks.logger.intervall', "did you mean 'interval'"]),
        (TINY, 'default_hooks.rng_state.seed', ["RNGStateHook takes no argument 'seed'", '(it takes priority)']),
        (DIT, 'val_evaluator.prefx', ['val_evaluator.prefx', "did you mean 'prefix'"]),
    ],
)
def test_a_misspelled_section_key_names_the_closest_valid_one(config, option, needles) -> None:
    """Before: mmengine's "__init__() got an unexpected keyword argument 'max_epoch'" traceback once the Runner had
    set up and printed its environment."""
    with pytest.raises(ConfigError) as err:
        load_config(config, {option: 1})
    assert all(n in str(err.value) for n in needles), str(err.value)


def test_iteration_loops_and_typed_loops_are_checked_against_their_class() -> None:
    with pytest.raises(ConfigError, match="IterBasedTrainLoop takes no argument 'max_iter'; did you mean 'max_iters'"):
        load_config(TINY, {'train_cfg': dict(by_epoch=False, max_iter=10)})
    with pytest.raises(ConfigError, match="IterBasedTrainLoop takes no argument 'val_intrval'"):
        load_config(TINY, {'train_cfg': dict(type='IterBasedTrainLoop', max_iters=10, val_intrval=5)})
    with pytest.raises(ConfigError, match=r"custom_hooks\[0\].after_iterr: EmptyCacheHook .* 'after_iter'"):
        load_config(TINY, {'custom_hooks': [dict(type='EmptyCacheHook', after_iterr=True)]})
    cfg = load_config(TINY, {'train_cfg': dict(type='NoSuchLoop', anything=1)})  # unresolved: left to mmengine
    assert cfg.train_cfg.anything == 1


def test_train_reports_a_misspelled_section_key_in_one_line(tmp_path, capsys) -> None:
    from vispe.cli.train import main

    with pytest.raises(SystemExit) as exit_:
        main([TINY, '--work-dir', str(tmp_path / 'w'), '--cfg-options', 'train_cfg.max_epoch=3'])
    message = str(exit_.value.code)
    assert message.startswith('error: train_cfg.max_epoch') and "did you mean 'max_epochs'" in message
    one_line(message)
    assert not (tmp_path / 'w').exists()


# --- 3. every swept resolution is checked before the first is evaluated -----------------------------------------------
def test_eval_resolution_checks_every_resolution_before_evaluating_any(tmp_path, monkeypatch) -> None:
    """Before: 32 was evaluated, then the sweep stopped at 30 with the forward pass's error, and 48 never ran."""
    from test_resumable_sweeps import save_model
    from test_tools import tiny_config

    from vispe.cli.eval_resolution import main
    from vispe.evaluation.settings_sweep import SettingsEvaluator

    evaluated = []
    monkeypatch.setattr(SettingsEvaluator, 'metrics', lambda self, *a, **k: evaluated.append(a) or {})
    config = tiny_config(tmp_path)
    ckpt = save_model(load_config(config), tmp_path / 'model.pth')
    out = tmp_path / 'eval'
    with pytest.raises(SystemExit) as exit_:
        main([config, ckpt, '--resolutions', '32', '30', '48', '21x22', '--out', str(out), '--no-progress'])
    message = one_line(str(exit_.value.code))
    assert message.startswith('error: --resolutions 30, 21x22: not divisible by the model')
    assert (
        'patch 4x4' in message
        and 'nearest: 32, 20x24' in message
        and evaluated == []
        and not (out / 'results.json').exists()
    )
