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
    from vispe.sweeps.settings import SettingsEvaluator

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


# --- 4. images the model cannot take: the shape, which image, and the fix ---------------------------------------------
@pytest.fixture(scope='module')
def vit():
    from conftest import TINY_VIT

    import vispe

    return vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', **TINY_VIT).eval()


@pytest.mark.parametrize(
    'images, needles',
    [
        (
            [(3, 32, 32), (1, 32, 48)],
            ['image 1 of the list has shape (1, 32, 48): 1 channel(s)', 'x.expand(3, -1, -1)'],
        ),
        ([(3, 32, 32), (4, 32, 32)], ['image 1 of the list has shape (4, 32, 32)', 'drop the alpha channel']),
        ([(32, 32, 3)], ['image 0 of the list has shape (32, 32, 3)', 'channels-last', 'x.permute(2, 0, 1)']),
        ((2, 1, 32, 32), ['the input has shape (2, 1, 32, 32): 1 channel(s), but the model takes 3', 'x.expand(-1, 3']),
        ((1, 5, 32, 32), ['5 channel(s), but the model takes 3', 'in_chans=5']),
        ((32,), ['the input has shape (32,), not a batch of images (B, C, H, W)', 'a 1-D tensor is not an image']),
        ((3, 32, 32), ['the input has shape (3, 32, 32)', 'x[None]']),
    ],
)
def test_images_the_model_cannot_take_are_one_line_naming_the_image(vit, images, needles) -> None:
    """Before: torch's "Sizes of tensors must match", "expected input[2, 1, 32, 32] to have 3 channels" from the conv
    or an IndexError ("tuple index out of range") for a 1-D tensor."""
    import torch

    x = [torch.randn(s) for s in images] if isinstance(images, list) else torch.randn(images)
    with pytest.raises(ValueError) as err, torch.no_grad():
        vit(x)
    message = one_line(str(err.value))
    assert message.startswith('VisionTransformerPE: ') and all(n in message for n in needles), message


# --- 5. a directory where a file belongs is named a directory, with what in it was probably meant -------------------
def test_a_work_dir_given_as_the_checkpoint_names_its_latest_checkpoint(tmp_path) -> None:
    """Before: "checkpoint 'work_dirs/x' does not exist", of a folder that plainly exists."""
    from test_tools import tiny_config

    from vispe.cli.eval_resolution import main

    work = tmp_path / 'work'
    work.mkdir()
    for n in (1, 2):
        (work / f'epoch_{n}.pth').write_bytes(b'')
    with pytest.raises(SystemExit) as exit_:
        main([tiny_config(tmp_path), str(work), '--out', str(tmp_path / 'eval'), '--no-progress'])
    message = one_line(str(exit_.value.code))
    assert f"error: checkpoint '{work}' is a directory, not a file" in message
    assert f"its latest checkpoint is '{work / 'epoch_2.pth'}'" in message


def test_a_directory_given_as_an_image_or_config_is_named_a_directory(tmp_path, capsys) -> None:
    from test_resumable_sweeps import save_model
    from test_tools import tiny_config

    from vispe.cli.infer import main

    config = tiny_config(tmp_path)
    ckpt = save_model(load_config(config), tmp_path / 'model.pth')
    photos = tmp_path / 'photos'
    photos.mkdir()
    (photos / 'cat.png').write_bytes(b'')
    with pytest.raises(SystemExit):
        main([config, ckpt, str(photos)])
    err = capsys.readouterr().err
    assert (
        f"error: image '{photos}' is a directory, not a file; pass the images in it, e.g. '{photos / 'cat.png'}'" in err
    )
    with pytest.raises(FileNotFoundError, match="config file 'configs/vit' is a directory, not a file; pass the"):
        load_config('configs/vit')


# --- 6. infer_points: each file classified or refused on its own line ------------------------------------------------
def test_infer_points_reports_degenerate_and_malformed_clouds_file_by_file(tmp_path, monkeypatch, capsys) -> None:
    """Before: one cloud of a repeated point stopped every file's classification ("stack expects each tensor to be
    equal size"), and an .xyz file of two columns or of words was read as a single point (or none)."""
    import importlib.util
    import sys

    from conftest import needs_open3d, tiny_point_config
    from test_resumable_sweeps import save_model

    needs_open3d()
    config = tiny_point_config(tmp_path)
    ckpt = save_model(load_config(config), tmp_path / 'model.pth')
    rng = __import__('numpy').random.default_rng(0)
    lines = '\n'.join(' '.join(f'{v:.4f}' for v in row) for row in rng.normal(size=(300, 3)))
    (tmp_path / 'good.xyz').write_text(lines + '\n')
    (tmp_path / 'same.xyz').write_text('0.1 0.2 0.3\n' * 400)  # one point repeated: FPS finds one distinct point
    (tmp_path / 'two.xyz').write_text('0.1 0.2\n0.3 0.4\n')
    (tmp_path / 'words.xyz').write_text('0.1 0.2 0.3\nx y z\n')
    files = [str(tmp_path / n) for n in ('good.xyz', 'same.xyz', 'two.xyz', 'words.xyz')]
    spec = importlib.util.spec_from_file_location('infer_points_tool', os.path.join(ROOT, 'tools', 'infer_points.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(sys, 'argv', ['infer_points.py', config, ckpt, *files])
    with pytest.raises(SystemExit) as exit_:
        tool.main()
    assert exit_.value.code == '2 of 4 files failed'
    out, err = capsys.readouterr()
    assert [line.split(': ', 1)[0] for line in out.strip().splitlines()] == files[:2]
    errors = [line for line in err.splitlines() if line.startswith('error: ')]
    assert len(errors) == 2 and 'Traceback' not in err, err
    assert (
        errors[0].startswith(f'error: {files[2]}, line 1: a .xyz line holds at least 3 numbers')
        and '2 columns' in errors[0]
    )
    assert errors[1].startswith(f'error: {files[3]}, line 2: ') and 'not a number' in errors[1]


# --- 2. benchmark: an unknown model or a --model-kwargs item without '=' -------------------------------------------
@pytest.mark.parametrize(
    'argv, needle',
    [
        (['--model', 'vit_tiny_patch16_22'], "did you mean 'vit_tiny_patch16_224'"),
        (
            ['--model', 'vit_tiny_patch16_224', '--model-kwargs', 'depth'],
            "--model-kwargs takes KEY=VALUE pairs, got 'depth'",
        ),
    ],
)
def test_benchmark_bad_model_is_one_line_exit_2(argv, needle, capsys) -> None:
    """Before: timm's "RuntimeError: Unknown model" traceback; DictAction's ValueError traceback."""
    from test_benchmark import load_tool

    assert load_tool().main([*argv, '--encodings', 'rope_axial']) == 2
    err = capsys.readouterr().err
    assert one_line(err).startswith('benchmark.py: error: ') and needle in err, err


# --- 7. the one-line error before the environment dump ---------------------------------------------------------------
def test_a_data_error_is_said_before_any_environment_dump(tmp_path, capfd) -> None:
    """Before: mmengine logged ~140 lines of environment and config while building the Runner, then the data set
    failed and the one-line error came last. Now the dump waits until the data sets are built."""
    from vispe.cli.train import main

    config = os.path.join(ROOT, 'configs/vit/vit_tiny_imagefolder.py')
    missing = str(tmp_path / 'no_such_tree')
    with pytest.raises(SystemExit) as exit_:
        main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options', f'data_root={missing}'])
    message = str(exit_.value.code)
    assert message.startswith('error: ') and 'no_such_tree' in message
    printed = capfd.readouterr()
    assert 'System environment' not in printed.out + printed.err and 'Config:' not in printed.out + printed.err


def test_dit_and_the_multiview_transformer_name_images_they_cannot_take() -> None:
    """The same class of input for the other image backbones: one line naming the shape and the fix."""
    import torch

    from vispe.backbones import MultiViewTransformer
    from vispe.backbones.dit import DiT

    dit = DiT(img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    t, y = torch.zeros(2), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r'DiT: the input has shape \(2, 3, 16\), not a batch of images'):
        dit(torch.randn(2, 3, 16), t, y)
    with pytest.raises(ValueError, match=r'DiT: the input has shape \(2, 1, 16, 16\): 1 channel\(s\), but the model '
                       r'takes 3; repeat the gray channel'):  # fmt: skip
        dit(torch.randn(2, 1, 16, 16), t, y)
    views = MultiViewTransformer(encoding='plucker', img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2)
    K, poses = torch.eye(3).expand(1, 2, 3, 3), torch.eye(4).expand(1, 2, 4, 4)
    with pytest.raises(ValueError, match=r'MultiViewTransformer: images \(1, 2, 1, 16, 16\) have 1 channel\(s\) per '
                       r'view, but the model takes 3'):  # fmt: skip
        views(torch.randn(1, 2, 1, 16, 16), K, poses)


# --- a negative class count and a misspelt timm name ------------------------------------------------------------------
@pytest.mark.parametrize(
    'build',
    [
        lambda: __import__('vispe').create_model('vit_tiny_patch16_224', num_classes=-1),
        lambda: __import__('vispe').backbones.VideoTransformer(num_classes=-1),
        lambda: __import__('vispe').backbones.PointTransformer(num_classes=-2),
    ],
    ids=['vit', 'video', 'point'],
)
def test_a_negative_class_count_is_refused(build) -> None:
    """Before: num_classes=-1 built a model without a head (timm's Identity for counts <= 0), silently."""
    with pytest.raises(ValueError, match=r'num_classes must be an int >= 0 \(0: no head'):
        build()


def test_a_misspelt_timm_name_names_the_closest() -> None:
    """Before: timm's 'Unknown model (vit_tiny_patch16_244)' with no name to try."""
    import vispe

    with pytest.raises(ValueError, match=r"unknown model 'vit_tiny_patch16_244'; did you mean 'vit_tiny_patch16_224'"):
        vispe.create_model('vit_tiny_patch16_244')
    assert vispe.create_model('vit_tiny_patch16_224', num_classes=0).num_classes == 0  # 0: the features


@pytest.mark.parametrize('shape', [(1, 3, 0, 32), (1, 3, 32, 0), [(3, 0, 32)]], ids=['height', 'width', 'list'])
def test_an_image_without_pixels_is_refused_in_one_line(shape) -> None:
    """Before: torch's 'Calculated padded input size per channel: (0 x 32)' from inside the patch embedding."""
    import torch

    import vispe

    model = vispe.create_model('vit_tiny_patch16_224', img_size=32, patch_size=8, depth=1).eval()
    images = [torch.rand(*s) for s in shape] if isinstance(shape, list) else torch.rand(*shape)
    with pytest.raises(ValueError, match=r'^VisionTransformerPE: image size \d+x\d+ has a side of no pixels'):
        model(images)
