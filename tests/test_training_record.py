"""What a checkpoint records of its training decides the evaluation's maths and titles (issue 38, class 1).

Before: ``--cfg-options model.backbone.img_size=64`` on a model trained at 32 px made ``interpolate`` scale from 64
(12.9% at 48 px instead of 92.9%) under a title saying "trained at 32"; ``vispe.create_model(img_size=64,
checkpoint_path=...)`` loaded a rotary model silently; a run on mixed sizes recorded its nominal 32 px, and
``interpolate`` / ``yarn`` scaled from it."""

from __future__ import annotations

import pytest
from conftest import train_in_process
from test_tools import tiny_config

import vispe
from vispe.cli.test import main as run_test_command
from vispe.engine.checkpoint import load_checkpoint
from vispe.engine.config import load_config
from vispe.engine.runner import build_runner
from vispe.evaluation import report
from vispe.evaluation.trained_model import load_model, model_encodings
from vispe.sweeps import resolution as R


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Two Runner iterations of a tiny rope_mixed ViT at 32 px (patch 4: an 8x8 training grid)."""
    tmp = tmp_path_factory.mktemp('train')
    return train_in_process(tiny_config(tmp, encoding='rope_mixed'), str(tmp / 'work'))


@pytest.fixture(scope='module')
def trained_on_sizes(tmp_path_factory):
    """The same on mixed sizes: each batch at one side drawn from 16..48 px."""
    tmp = tmp_path_factory.mktemp('sizes')
    config = tiny_config(tmp, encoding='rope_mixed')
    with open(config, 'a') as f:
        f.write(
            "train_dataloader.update(batch_sampler=dict(type='SharedSizeBatchSampler'),"
            " collate_fn=dict(type='vispe.mixed_size_collate'),"
            " dataset=dict(num_samples=16, size_policy=dict(type='SquareSizes', min_size=16, max_size=48,"
            ' patch_size=4)))\n'
        )
    return train_in_process(config, str(tmp / 'work'))


def sweep(config, ckpt, tmp_path, strategies, resolutions=(48,), **options):
    return R.sweep(load_config(config, options or None), ckpt, list(resolutions), strategies, 'cpu',
                   show_progress=False, out_dir=str(tmp_path))  # fmt: skip


def test_a_model_built_at_another_size_follows_the_checkpoints_training_grid(trained, tmp_path):
    config, ckpt, _, _ = trained
    expected = sweep(config, ckpt, tmp_path / 'as_trained', ['interpolate'])
    with pytest.warns(UserWarning, match=r'follows the checkpoint \(trained at 32 px: 8x8 tokens\), not the model as '
                      r'built \(the grid 16x16\)'):  # fmt: skip
        got = sweep(config, ckpt, tmp_path / 'built_at_64', ['interpolate'], **{'model.backbone.img_size': 64})
    assert got['train_resolution'] == 32 and 'trained at 32 px' in report.describe(got)
    assert [r['value'] for r in got['results']] == [r['value'] for r in expected['results']]  # the same maths


def test_create_model_at_another_size_follows_the_checkpoint_and_says_so(trained):
    config, ckpt, _, _ = trained
    args = dict(load_config(config).model.backbone, img_size=64)  # vispe.create_model(**cfg.model.backbone, ...)
    with pytest.warns(UserWarning, match='follows the checkpoint .trained at 32 px: 8x8 tokens.'):
        model = vispe.create_model(**args, checkpoint_path=ckpt)
    assert {enc.train_grid for enc in model_encodings(model) if hasattr(enc, 'train_grid')} == {(8, 8)}


def test_a_run_on_several_sizes_records_them_and_refuses_a_strategy_needing_one(trained_on_sizes, tmp_path):
    config, ckpt, _, _ = trained_on_sizes
    meta = load_checkpoint(ckpt)['meta']
    assert meta['train_sizes'] == 'SquareSizes(min_size=16, max_size=48, patch_size=4)'
    assert 'train_resolution' not in meta  # not the nominal 32 px
    with pytest.raises(ValueError, match=r"strategies \['interpolate'\] scale positions from one training size"):
        sweep(config, ckpt, tmp_path / 'a', ['interpolate'])
    with pytest.raises(ValueError, match=r'trained on sizes SquareSizes.*: pass --resolutions'):
        R.sweep(load_config(config), ckpt, None, ['none'], 'cpu', show_progress=False)
    done = sweep(config, ckpt, tmp_path / 'b', None, resolutions=(32, 48))
    assert {r['strategy'] for r in done['results']} == {'none'}  # the default: what the run can be evaluated with
    assert done['train_resolution'] is None
    assert 'trained on sizes SquareSizes(min_size=16, max_size=48, patch_size=4)' in report.describe(done)


def test_the_test_tool_sees_the_training_grid_as_the_sweep_does(trained, tmp_path):
    """Before: ``vispe test`` with a strategy on a model built at another size scaled from the size built (16x16
    tokens), where eval-resolution scaled from the checkpoint's 8x8: two tools, two numbers for one cell."""
    config, ckpt, _, _ = trained
    options = {'model.backbone.img_size': 64, 'model.backbone.encoding.strategy': 'interpolate'}
    cfg = load_config(config, options, work_dir=str(tmp_path))
    cfg.load_from, cfg.train_dataloader = ckpt, None  # as vispe test runs it
    cfg.train_cfg = cfg.optim_wrapper = cfg.param_scheduler = None
    runner = build_runner(cfg)
    runner.test()
    assert {enc.train_grid for enc in model_encodings(runner.model)} == {(8, 8)}
    model, _ = load_model(load_config(config, options), ckpt, 'cpu')  # the sweeps' loader agrees
    assert {enc.train_grid for enc in model_encodings(model)} == {(8, 8)}


def test_the_test_tool_refuses_a_strategy_for_a_run_on_several_sizes(trained_on_sizes, tmp_path):
    config, ckpt, _, _ = trained_on_sizes
    with pytest.raises(SystemExit, match="evaluate it with strategy 'none'"):
        run_test_command([config, ckpt, '--work-dir', str(tmp_path), '--cfg-options',
                          'model.backbone.encoding.strategy=interpolate'])  # fmt: skip


def test_a_sweep_describes_the_run_it_evaluates_with_its_encodings_options(tmp_path):
    """Before: the title gave the evaluation config's training-set size (the shipped config's), not the run's, and
    ``ape_learned`` with ``lape=True`` was labelled by its bare name."""
    from vispe.engine.train import train

    config = tiny_config(tmp_path, samples=8)
    train(config, str(tmp_path / 'work'), {'model.backbone.encoding': 'ape_learned:lape=True'})
    ckpt = str(tmp_path / 'work' / 'epoch_1.pth')
    options = {'model.backbone.encoding': 'ape_learned:lape=True', 'train_dataloader.dataset.num_samples': 999}
    got = sweep(config, ckpt, tmp_path / 'out', ['bicubic'], **options)
    assert {row['encoding'] for row in got['results']} == {'ape_learned:lape=True'}
    title = report.describe(got)
    assert (
        title.startswith('ViT (ape_learned:lape=True; patch 4, width 32, depth 2, heads 2)')
        and '8 training samples' in title
    ), title
