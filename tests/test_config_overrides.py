"""``--cfg-options`` on a config's top-level variables reach everything derived from them (issue 38, class 2).
Before: ``data_root=/other/tree`` trained on the config's own tree and ``train_resolution=32`` trained at 64 while the
dumped config said 32; mmengine merged the option into the top-level key alone."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT

from vispe.engine.config import load_config
from vispe.engine.config_files import ConfigError

IMAGEFOLDER = os.path.join(ROOT, 'configs/vit/vit_tiny_imagefolder.py')
SHAPES = os.path.join(ROOT, 'configs/vit/vit_tiny_ape_learned_shapes2d_position.py')


def loaders(cfg):
    return [cfg[name].dataset for name in ('train_dataloader', 'val_dataloader', 'test_dataloader')]


def test_a_data_root_and_a_resolution_reach_the_loaders_and_the_model(tmp_path) -> None:
    before = {p: open(p, 'rb').read() for p in (IMAGEFOLDER,)}
    cfg = load_config(IMAGEFOLDER, {'data_root': '/other/tree', 'train_resolution': 48}, str(tmp_path))
    assert [d.data_root for d in loaders(cfg)] == ['/other/tree'] * 3
    assert [d.image_size for d in loaders(cfg)] == [48] * 3 and cfg.model.backbone.img_size == 48
    assert cfg.data_root == '/other/tree' and cfg.train_resolution == 48
    assert "data_root='/other/tree'" in cfg.pretty_text.replace('"', "'")  # what the run dumps says the same
    assert cfg.filename == IMAGEFOLDER and {p: open(p, 'rb').read() for p in before} == before  # files untouched


def test_variables_of_base_files_and_helper_dicts_are_applied_where_defined(tmp_path) -> None:
    """train_resolution and shapes2d live in _base_/datasets/shapes2d_position.py, max_epochs in the schedule's
    base, two inheritance steps below the config given."""
    cfg = load_config(SHAPES, {'train_resolution': 48, 'max_epochs': 3}, str(tmp_path))
    assert [d.image_size for d in loaders(cfg)] == [48] * 3
    assert cfg.train_cfg.max_epochs == 3 and cfg.train_cfg.val_interval == 3
    cfg = load_config(SHAPES, {'shapes2d.image_size': 40}, str(tmp_path))
    assert [d.image_size for d in loaders(cfg)] == [40] * 3 and cfg.train_dataloader.dataset.num_samples == 6000
    cfg = load_config(SHAPES, {'train_cfg.max_epochs': 2}, str(tmp_path))  # a section: mmengine's merge, as before
    assert cfg.train_cfg.max_epochs == 2 and cfg.train_cfg.val_interval == 30


def test_a_variable_after_non_ascii_text_on_its_line(tmp_path) -> None:
    """Python reports columns in UTF-8 bytes: the rewrite must cut the line there, not at a character index."""
    config = tmp_path / 'c.py'
    config.write_text("note = 'café'; size = 8\nmodel = dict(type='X', size=size)\n", encoding='utf-8')
    cfg = load_config(str(config), {'size': 9}, str(tmp_path))
    assert cfg.model.size == 9 and cfg.note == 'café'


def test_a_nested_option_the_defining_file_does_not_hold_yet(tmp_path) -> None:
    """A dotted option through a helper dict whose file lacks the intermediate dict creates it (no KeyError while the
    config's code runs), and what is derived from the helper follows."""
    (tmp_path / 'base.py').write_text('loader = dict(batch_size=2)\nderived = dict(inner=loader)\n')
    config = tmp_path / 'c.py'
    config.write_text("_base_ = ['base.py']\nmodel = dict(type='X')\n")
    cfg = load_config(str(config), {'loader.sampler.shuffle': False}, str(tmp_path))
    assert cfg.loader.sampler.shuffle is False and cfg.derived.inner.sampler.shuffle is False
    assert cfg.derived.inner.batch_size == 2


def test_an_option_that_nothing_reads_is_refused_naming_the_keys_that_work() -> None:
    """Before: ``image_size=48`` and ``num_classes=10`` became new top-level keys that nothing read, and the run went
    on at 32 px with 3 classes."""
    config = os.path.join(ROOT, 'configs/vit/vit_tiny_shapes2d_position.py')
    with pytest.raises(ConfigError, match=r'image_size: .* old values; set train_dataloader\.dataset\.image_size or'):
        load_config(config, {'image_size': 48})
    with pytest.raises(ConfigError, match=r'num_classes: .* set model\.backbone\.num_classes$'):
        load_config(config, {'num_classes': 10})
    with pytest.raises(ConfigError, match=r'set model\.backbone\.depth$'):
        load_config(config, {'modle.backbone.depth': 2})
    with pytest.raises(ConfigError, match=r"did you mean 'model'"):
        load_config(config, {'modle': {}})
    assert load_config(config, {'model.backbone.num_classes': 10}).model.backbone.num_classes == 10


def test_an_option_on_a_dumped_configs_unread_helper_is_refused(tmp_path) -> None:
    """Before: ``data_root=...`` on a work dir's dumped config (whose data sets hold the old path as a literal) was
    accepted, and the test ran on the old data."""
    dumped = tmp_path / 'vit_tiny_imagefolder.py'
    load_config(os.path.join(ROOT, 'configs/vit/vit_tiny_imagefolder.py')).dump(str(dumped))
    with pytest.raises(ConfigError, match=r"'data_root' is a helper value that no part of the config reads.*"
                                          r'set .*train_dataloader\.dataset\.data_root'):  # fmt: skip
        load_config(str(dumped), {'data_root': str(tmp_path)})
    cfg = load_config(os.path.join(ROOT, 'configs/vit/vit_tiny_imagefolder.py'), {'data_root': str(tmp_path)})
    assert cfg.test_dataloader.dataset.data_root == str(tmp_path)  # in the source config the variable is read
