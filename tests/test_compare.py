"""The comparison helpers behind tools/compare_encodings.py and the demo."""

import pytest

from vispe.experiments.compare import Run, encoding_option, final_checkpoint, markdown_table, schedule_options


def test_encoding_option_single_and_combined():
    assert encoding_option('rope_mixed') == 'model.backbone.encoding=rope_mixed'
    assert encoding_option('rope_mixed+peg') == 'model.backbone.encoding=[rope_mixed,peg]'


def test_schedule_needs_two_epochs():
    assert schedule_options(5) == ['train_cfg.max_epochs=5', 'train_cfg.val_interval=5']
    assert schedule_options(None) == []
    with pytest.raises(ValueError, match='at least 2 epochs'):
        schedule_options(1)


def test_final_checkpoint_only_for_finished_runs(tmp_path):
    config = 'configs/vit/vit_tiny_shapes2d_position.py'
    run = Run('position', config, str(tmp_path), ['train_cfg.max_epochs=3'])
    assert final_checkpoint(run) is None  # nothing yet
    (tmp_path / 'epoch_2.pth').write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_2.pth'))
    assert final_checkpoint(run) is None  # interrupted at epoch 2 of 3
    (tmp_path / 'epoch_3.pth').write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_3.pth'))
    assert final_checkpoint(run) == str(tmp_path / 'epoch_3.pth')
    default = Run('position', config, str(tmp_path))  # the config's own 30 epochs
    assert final_checkpoint(default) is None


def test_final_checkpoint_of_iteration_based_training(tmp_path):
    run = Run('shape_color', 'configs/dit/dit_tiny_shapes2d.py', str(tmp_path), ['train_cfg.max_iters=20'])
    (tmp_path / 'iter_10.pth').write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_10.pth'))
    assert final_checkpoint(run) is None
    (tmp_path / 'iter_20.pth').write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_20.pth'))
    assert final_checkpoint(run) == str(tmp_path / 'iter_20.pth')


def test_markdown_table_rows_and_columns():
    rows = [
        {'encoding': 'a', 'strategy': 's', 'resolution': 32, 'value': 90.0},
        {'encoding': 'a', 'strategy': 's', 'resolution': 64, 'value': 50.25},
        {'encoding': 'b', 'strategy': 'default', 'resolution': 32, 'value': 10.0},
    ]
    table = markdown_table(rows, ['32', '64']).splitlines()
    assert table[0] == '| encoding | strategy | 32 | 64 |'
    assert table[2] == '| a | s | 90.0 | 50.2 |'
    assert table[3] == '| b | default | 10.0 | nan |'


def test_a_run_is_evaluated_again_when_anything_its_cells_depend_on_changed(tmp_path):
    """Before: a results.json newer than the checkpoint was reused whole, whatever config it was computed with. Now
    the sweep engine reuses the cells whose checkpoint, config, data and versions are unchanged, and recomputes the
    run's own folder otherwise, saying so."""
    from test_tools import tiny_config

    from vispe.experiments.compare import train_and_evaluate

    run = Run('position', tiny_config(tmp_path), str(tmp_path / 'run'))
    said: list[str] = []
    first = train_and_evaluate(run, ['32'], said.append)
    again = train_and_evaluate(run, ['32'], said.append)
    assert any(line.startswith('reusing 3 of 3 finished cells') for line in said) and again == first
    run.cfg_options = ['test_dataloader.dataset.num_samples=16']  # another test set: the old numbers are not its
    said.clear()
    other = train_and_evaluate(run, ['32'], said.append)
    assert any('recomputing' in line and 'test_dataloader.dataset.num_samples' in line for line in said), said
    assert other['resolved_config']['test_dataloader.dataset.num_samples'] == 16


def test_supported_strategies_follow_the_encoding():
    from vispe.experiments.compare import supported_strategies

    config = 'configs/vit/vit_tiny_shapes2d_position.py'
    assert supported_strategies(Run('position', config, 'unused', [encoding_option('ape_learned')]))[0] == 'bicubic'
    assert 'ntk' in supported_strategies(Run('position', config, 'unused', [encoding_option('rope_mixed+peg')]))
