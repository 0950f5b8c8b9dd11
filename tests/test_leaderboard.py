"""Aggregation behind tools/leaderboard.py (the training itself is too long for the test suite)."""

import pytest

from vispe.evaluation.leaderboard import best_strategy, leaderboard_runs, markdown, plain_strategy, summarize

VALUES = {
    ('position', 'rope_axial', 'none', '32'): [100.0, 98.0],
    ('position', 'rope_axial', 'none', '64'): [20.0, 10.0],
    ('position', 'rope_axial', 'interpolate', '32'): [100.0, 98.0],
    ('position', 'rope_axial', 'interpolate', '64'): [80.0, 84.0],
    ('position', 'peg', 'default', '32'): [99.0, 97.0],
    ('position', 'peg', 'default', '64'): [30.0, 34.0],
}


def test_mean_and_spread_over_seeds():
    stats = summarize(VALUES)
    mean, std, n = stats[('position', 'rope_axial', 'interpolate', '64')]
    assert (mean, n) == (82.0, 2) and std == pytest.approx(2.8284, abs=1e-3)
    assert summarize({('t', 'e', 's', '32'): [5.0]})[('t', 'e', 's', '32')] == (5.0, 0.0, 1)


def test_best_strategy_ignores_the_training_resolution():
    stats = summarize(VALUES)
    assert best_strategy(stats, 'position', 'rope_axial', '32') == 'interpolate'
    assert plain_strategy(stats, 'position', 'rope_axial') == 'none'
    assert plain_strategy(stats, 'position', 'peg') == 'default'
    with pytest.raises(ValueError, match='no results'):
        best_strategy(stats, 'relation', 'peg', '32')


def test_markdown_lists_plain_and_best():
    lines = markdown(summarize(VALUES), 'position', ['32', '64']).splitlines()
    assert lines[2] == '| peg | default | 98.0 ± 1.4 | 32.0 ± 2.8 |'
    assert lines[3] == '| rope_axial | none | 99.0 ± 1.4 | 15.0 ± 7.1 |'
    assert lines[4] == '| rope_axial | interpolate (best) | 99.0 ± 1.4 | 82.0 ± 2.8 |'


def test_one_run_per_task_encoding_and_seed():
    runs = leaderboard_runs({'position': 'p.py', 'relation': 'r.py'}, ['a', 'b+c'], [0, 1, 2], 'out')
    assert len(runs) == 12
    assert runs[0].work_dir.endswith('position/a/seed0') and 'randomness.seed=0' in runs[0].cfg_options
    assert 'model.backbone.encoding=[b,c]' in runs[3].cfg_options


def test_plot_writes_a_png_per_call(tmp_path):
    from vispe.evaluation.leaderboard import plot

    path = plot(summarize(VALUES), ['position'], ['32', '64'], str(tmp_path / 'lb.png'))
    with open(path, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_regimes_are_runs_and_tables_of_their_own():
    from vispe.evaluation.compare import REGIME_CONFIGS
    from vispe.evaluation.leaderboard import regime_markdown, task_label

    regimes = {r: REGIME_CONFIGS[r] for r in ('fixed', 'aspect')}
    runs = leaderboard_runs({'position': REGIME_CONFIGS['fixed']['position']}, ['peg'], [0], 'out', regimes)
    assert [(r.task, r.regime, r.config) for r in runs] == [
        ('position', 'fixed', 'vit/vit_tiny_shapes2d_position.py'),
        ('position (aspect)', 'aspect', 'vit/vit_tiny_shapes2d_mixedres_aspect_position.py'),
    ]
    assert runs[0].work_dir == 'out/position/peg/seed0'  # the fixed regime's runs stay where they were
    assert runs[1].work_dir == 'out/aspect/position/peg/seed0'
    values = dict(VALUES)
    values[(task_label('position', 'aspect'), 'peg', 'default', '32')] = [96.0]
    values[(task_label('position', 'aspect'), 'peg', 'default', '64')] = [70.0]
    lines = regime_markdown(summarize(values), 'position', ['fixed', 'aspect'], ['32', '64']).splitlines()
    assert lines[2] == '| peg | fixed | default | 98.0 ± 1.4 | 32.0 ± 2.8 |'
    assert lines[3] == '| peg | aspect | default | 96.0 | 70.0 |'  # one seed: no spread
    assert lines[4] == '| rope_axial | fixed | none | 99.0 ± 1.4 | 15.0 ± 7.1 |'
