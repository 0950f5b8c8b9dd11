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


def test_previous_results_are_reused_only_for_the_same_checkpoint(tmp_path):
    import json
    import os
    import time

    from vispe.experiments.compare import _previous_results

    ckpt = tmp_path / 'epoch_3.pth'
    ckpt.write_bytes(b'x')
    path = tmp_path / 'results.json'
    assert _previous_results(str(path), str(ckpt), ['32']) is None  # nothing yet
    rows = [{'encoding': 'a', 'strategy': 's', 'resolution': 32, 'value': 1.0}]
    path.write_text(json.dumps({'checkpoint': str(ckpt), 'results': rows}))
    assert _previous_results(str(path), str(ckpt), ['32'])['results'] == rows
    assert _previous_results(str(path), str(ckpt), ['32', '48']) is None  # other resolutions
    assert _previous_results(str(path), str(ckpt), ['32'], ['s']) is not None
    assert _previous_results(str(path), str(ckpt), ['32'], ['s', 'ntk']) is None  # the model now has more strategies
    later = time.time() + 10
    os.utime(ckpt, (later, later))  # the checkpoint was rewritten after the evaluation
    assert _previous_results(str(path), str(ckpt), ['32']) is None


def test_supported_strategies_follow_the_encoding():
    from vispe.experiments.compare import supported_strategies

    config = 'configs/vit/vit_tiny_shapes2d_position.py'
    assert supported_strategies(Run('position', config, 'unused', [encoding_option('ape_learned')]))[0] == 'bicubic'
    assert 'ntk' in supported_strategies(Run('position', config, 'unused', [encoding_option('rope_mixed+peg')]))
