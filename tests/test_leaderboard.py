"""Aggregation behind tools/leaderboard.py (the training itself is too long for the test suite)."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from workbench.leaderboard_report import best_strategy, markdown, plain_strategy, summarize
from workbench.leaderboard_runs import leaderboard_runs

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
    from workbench.leaderboard_report import plot

    path = plot(summarize(VALUES), ['position'], ['32', '64'], str(tmp_path / 'lb.png'))
    with open(path, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_plot_puts_the_test_sizes_in_increasing_order(tmp_path, monkeypatch):
    """The sweep lists 1x first (tables read it so); a line drawn in that order would run 32 -> 16 -> 24 -> 48 and
    show a dip that is not there. The plot's x axis runs by pixel count, the training size dotted where it falls."""
    from workbench import leaderboard_report as lbr

    figures = []
    monkeypatch.setattr(lbr.figures, 'save_figure', lambda fig, path: figures.append(fig) or path)
    values = {('position', 'peg', 'default', r): [50.0] for r in ('32', '16', '64', '44x24', '24x44')}
    lbr.plot(summarize(values), ['position'], ['32', '16', '64', '44x24', '24x44'], str(tmp_path / 'lb.png'))
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ['16', '32', '24x44', '44x24', '64']
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ':']
    assert [line.get_xdata()[0] for line in dotted] == [1]  # 32 px, the training size
    lbr.figures.plt().close(figures[0])


def test_regimes_are_runs_and_tables_of_their_own():
    from workbench.leaderboard_report import regime_markdown, task_label
    from workbench.leaderboard_runs import REGIME_CONFIGS

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


def _results(resolutions, strategies, value=50.0, complete=True):
    """An eval_resolution results.json as json.load gives it back: 32 an int, 44x24 a list [44, 24]."""
    as_json = [int(r) if 'x' not in r else [int(v) for v in r.split('x')] for r in resolutions]
    rows = [dict(encoding='peg', strategy=s, resolution=r, value=value) for r in as_json for s in strategies]
    return dict(results=rows, checkpoint='/elsewhere/epoch_12.pth', complete=complete)


def test_non_square_results_land_in_their_columns(monkeypatch):
    """JSON reads a (44, 24) resolution back as [44, 24]: the tables still find it under '44x24'."""
    from workbench import leaderboard_runs as lb

    monkeypatch.setattr(lb, 'train_and_evaluate', lambda run, res, log: _results(res, ['default'], value=42.0))
    runs = leaderboard_runs({'position': 'p.py'}, ['peg'], [0], 'out')
    values = lb.collect(runs, ['32', '44x24'], log=lambda _: None)
    assert values[('position', 'peg', 'default', '44x24')] == [42.0]
    assert '| peg | default | 42.0 | 42.0 |' in markdown(summarize(values), 'position', ['32', '44x24'])


def test_the_archive_keeps_each_run_and_serves_it_where_no_checkpoint_is(tmp_path, monkeypatch):
    from workbench import leaderboard_runs as lb

    trained = []

    def train_and_evaluate(run, resolutions, log):
        trained.append(run.work_dir)
        return _results(resolutions, ['default'], value=70.0)

    monkeypatch.setattr(lb, 'train_and_evaluate', train_and_evaluate)
    monkeypatch.setattr(lb, 'supported_strategies', lambda run: ['default'])
    out, archive = tmp_path / 'out', lb.Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    runs = leaderboard_runs({'position': 'p.py'}, ['peg'], [0, 1], str(out))
    first = lb.collect(runs, ['32', '64', '44x24'], log=lambda _: None, archive=archive)
    assert len(trained) == 2 and first[('position', 'peg', 'default', '64')] == [70.0, 70.0]
    stored = tmp_path / 'archive' / 'position' / 'peg' / 'seed1'
    assert json.loads((stored / 'results.json').read_text())['results'][0]['value'] == 70.0
    meta = json.loads((stored / 'run.json').read_text())
    assert meta['seed'] == 1 and meta['config'] == 'p.py' and meta['train_and_eval_seconds'] >= 0
    assert meta['cpu_seconds'] >= 0

    # another machine: no checkpoints, the archive only -> nothing is trained, the same values come back
    lines = []
    again = lb.collect(runs, ['32', '64', '44x24'], log=lines.append, archive=archive)
    assert len(trained) == 2 and again == first and all(line.startswith('archived: ') for line in lines)

    # asked for another resolution, or a result with failed cells: the run is trained again
    lb.collect(runs[:1], ['32', '96'], log=lambda _: None, archive=archive)
    (stored / 'results.json').write_text(json.dumps(_results(['32', '64'], ['default'], complete=False)))
    lb.collect(runs[1:], ['32', '64'], log=lambda _: None, archive=archive)
    assert len(trained) == 4

    # asked with other options (a board of another --epochs): the archived run is not its answer
    longer = [replace(run, cfg_options=[*run.cfg_options, 'train_cfg.max_epochs=20']) for run in runs]
    lb.collect(longer, ['32', '64'], log=lambda _: None, archive=archive)
    assert len(trained) == 6


def test_a_run_records_its_wall_time_and_its_cpu_time_apart(tmp_path, monkeypatch):
    """A run that waits (another job on its core, a paused process) takes wall time, not CPU time; one that
    computes takes both: run.json keeps the two, so a wall time stretched by the machine can be told apart."""
    import time

    from workbench import leaderboard_runs as lb

    monkeypatch.setattr(lb, 'final_checkpoint', lambda run: None)
    run = leaderboard_runs({'position': 'p.py'}, ['peg'], [0], str(tmp_path / 'out'))[0]

    def waits(run, resolutions, log):
        time.sleep(0.4)
        return {}

    def computes(run, resolutions, log):  # until it has had 0.3 s of CPU, however busy the machine is
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return {}

    _, timing = lb._timed(waits, run, ['32'])
    assert timing['train_and_eval_seconds'] >= 0.4 and timing['cpu_seconds'] < 0.1
    _, timing = lb._timed(computes, run, ['32'])
    wall, cpu = timing['train_and_eval_seconds'], timing['cpu_seconds']
    assert cpu >= 0.3 and wall >= cpu - 0.01  # one thread: no more CPU than wall time


def test_a_resumed_run_records_where_it_resumed_and_its_threads(tmp_path, monkeypatch):
    """An interrupted run resumed from its last checkpoint times only the rest of the run: run.json says so, and
    records the torch thread count (it changes the order of float sums, so a seed reproduces only at the same
    count). A run started from scratch records no checkpoint."""
    import torch

    from workbench import leaderboard_runs as lb

    monkeypatch.setattr(lb, 'final_checkpoint', lambda run: None)  # not finished: trained (here: resumed) now
    runs = leaderboard_runs({'position': 'p.py'}, ['peg'], [0, 1], str(tmp_path / 'out'))
    os.makedirs(runs[0].work_dir)
    (Path(runs[0].work_dir) / 'epoch_24.pth').write_bytes(b'')  # the pointer names a file of its own work dir
    (Path(runs[0].work_dir) / 'last_checkpoint').write_text(os.path.join(runs[0].work_dir, 'epoch_24.pth'))
    archive = lb.Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    lb.collect(runs, ['32'], log=lambda _: None, archive=archive, work=lambda run, res, log: _results(res, ['default']))
    resumed, fresh = (json.loads((Path(archive.folder(run)) / 'run.json').read_text()) for run in runs)
    assert resumed['resumed_from'] == 'epoch_24.pth' and fresh['resumed_from'] is None
    assert resumed['threads'] == fresh['threads'] == torch.get_num_threads()


def test_a_run_records_its_mean_training_loss_per_epoch_the_resumed_session_replacing_the_interrupted(
    tmp_path, monkeypatch
):
    """run.json keeps each epoch's mean logged loss (mmengine's vis_data/scalars.json), so a plateau can be read
    from the archive; an epoch that an interrupted session had begun and the resumed one trained again counts
    once, with the resumed session's losses. Lines without a loss (validation metrics) are not losses."""
    from workbench import leaderboard_runs as lb

    monkeypatch.setattr(lb, 'final_checkpoint', lambda run: None)
    run = leaderboard_runs({'position': 'p.py'}, ['peg'], [0], str(tmp_path / 'out'))[0]

    def session(stamp, rows):
        folder = Path(run.work_dir) / stamp / 'vis_data'
        folder.mkdir(parents=True)
        (folder / 'scalars.json').write_text(''.join(json.dumps(row) + '\n' for row in rows))

    session(
        '20261203_100000',
        [
            dict(loss=1.4, epoch=1, step=20),
            dict(loss=1.2, epoch=1, step=40),
            dict(accuracy=30.0, step=40),
            dict(loss=1.0, epoch=2, step=60),
            dict(loss=9.0, epoch=3, step=80),  # epoch 3 interrupted
        ],
    )
    session('20261203_110000', [dict(loss=0.5, epoch=3, step=80), dict(loss=0.3, epoch=3, step=100)])
    archive = lb.Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    lb.collect([run], ['32'], log=lambda _: None, archive=archive, work=lambda r, res, log: _results(res, ['default']))
    record = json.loads((Path(archive.folder(run)) / 'run.json').read_text())
    assert record['train_loss'] == {'1': 1.3, '2': 1.0, '3': 0.4}


def test_a_run_with_a_local_checkpoint_is_evaluated_from_it_not_from_the_archive(tmp_path, monkeypatch):
    from workbench import leaderboard_runs as lb

    monkeypatch.setattr(lb, 'supported_strategies', lambda run: ['default'])
    monkeypatch.setattr(lb, 'final_checkpoint', lambda run: '/local/epoch_12.pth')
    monkeypatch.setattr(lb, 'train_and_evaluate', lambda run, res, log: _results(res, ['default'], value=90.0))
    archive = lb.Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    runs = leaderboard_runs({'position': 'p.py'}, ['peg'], [0], str(tmp_path / 'out'))
    archive.store(runs[0], _results(['32'], ['default'], value=10.0), dict(train_and_eval_seconds=5.0))
    values = lb.collect(runs, ['32'], log=lambda _: None, archive=archive)
    assert values[('position', 'peg', 'default', '32')] == [90.0]
    # its results replace the archived ones; the record of the archived training is kept (nothing trained here)
    assert archive.load(runs[0], ['32']) is None  # a local checkpoint: the archive is not read
    folder = tmp_path / 'archive' / 'position' / 'peg' / 'seed0'
    assert json.loads((folder / 'results.json').read_text())['results'][0]['value'] == 90.0
    assert json.loads((folder / 'run.json').read_text())['train_and_eval_seconds'] == 5.0


def test_a_board_without_fixed_runs_leaves_the_model_zoo_alone(tmp_path, monkeypatch, capsys):
    from workbench import leaderboard as cli

    def collect(runs, resolutions, archive=None, jobs=1, train=True):
        return {(run.task, run.encoding, 'default', r): [60.0] for run in runs for r in resolutions}

    def write_model_zoo(*args):
        raise AssertionError('the zoo holds fixed-regime models; an aspect-only board must not rewrite it')

    monkeypatch.setattr(cli, 'collect', collect)
    monkeypatch.setattr(cli, 'write_model_zoo', write_model_zoo)
    models = tmp_path / 'models'
    argv = ['--regimes', 'aspect', '--tasks', 'position', '--encodings', 'peg', '--seeds', '0', '--out']
    cli.main([*argv, str(tmp_path / 'out'), '--models', str(models), '--resolutions', '32', '64'])
    assert 'left as it is' in capsys.readouterr().out and not models.exists()
    assert '| peg | default | 60.0 | 60.0 |' in (tmp_path / 'out' / 'leaderboard.md').read_text()


def test_the_regime_plot_draws_each_encoding_with_a_line_per_regime(tmp_path):
    from workbench.leaderboard_report import regime_pivot, regime_plot, task_label

    values = dict(VALUES)
    values[(task_label('position', 'sizes'), 'rope_axial', 'none', '64')] = [99.0, 97.0]
    values[(task_label('position', 'sizes'), 'rope_axial', 'interpolate', '64')] = [99.5]  # not the plain strategy
    table = regime_pivot(summarize(values), 'position', 'rope_axial', ['fixed', 'sizes', 'aspect'], ['32', '64'])
    assert table.keys == [('fixed',), ('sizes',)]  # no aspect run: no line
    assert table.stat(('sizes',), '64') == (98.0, pytest.approx(1.414, abs=1e-3), 2)
    assert table.get(('sizes',), '32') is None
    path = regime_plot(summarize(values), 'position', ['fixed', 'sizes'], ['32', '64'], str(tmp_path / 'r.png'))
    with open(path, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    with pytest.raises(ValueError, match='no results for relation'):
        regime_plot(summarize(values), 'relation', ['fixed', 'sizes'], ['32'], str(tmp_path / 'x.png'))


def test_a_board_of_several_regimes_plots_them_per_task(tmp_path, monkeypatch):
    from workbench import leaderboard as cli

    def collect(runs, resolutions, archive=None, jobs=1, train=True):
        return {(run.task, run.encoding, 'default', r): [60.0] for run in runs for r in resolutions}

    monkeypatch.setattr(cli, 'collect', collect)
    argv = ['--regimes', 'sizes', 'aspect', '--tasks', 'position', '--encodings', 'peg', '--seeds', '0']
    cli.main([*argv, '--out', str(tmp_path / 'out'), '--models', '', '--resolutions', '32', '64'])
    assert (tmp_path / 'out' / 'regimes_position.png').read_bytes()[:4] == b'\x89PNG'
    assert not (tmp_path / 'out' / 'regimes_relation.png').exists()


def fake_work(run, resolutions, log):
    """A leaderboard run's work in a spawned process (module level, so it pickles): its seed as the accuracy, or a
    failure for seed 13."""
    import os

    if run.seed == 13:
        raise ValueError('diverged')
    return {
        'results': [
            {
                'encoding': run.encoding,
                'strategy': 'default',
                'resolution': int(resolutions[0]),
                'value': float(run.seed),
                'pid': os.getpid(),
            }
        ]
    }


def test_parallel_jobs_archive_every_finished_run_and_report_the_failures_together(tmp_path):
    from workbench.leaderboard_runs import Archive, collect

    archive = Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    config = 'vit/vit_tiny_shapes2d_position.py'  # peg's strategies are read from it when a run is read back
    runs = leaderboard_runs({'position': config}, ['peg'], [0, 13, 2], str(tmp_path / 'out'))
    logs = []
    with pytest.raises(RuntimeError, match=r'1 of 3 leaderboard runs failed') as failure:
        collect(runs, ['32'], log=logs.append, archive=archive, jobs=2, work=fake_work)
    assert 'seed13: ValueError: diverged' in str(failure.value)
    assert sorted(p.parent.name for p in (tmp_path / 'archive').rglob('results.json')) == ['seed0', 'seed2']
    pids = {json.loads(p.read_text())['results'][0]['pid'] for p in (tmp_path / 'archive').rglob('results.json')}
    assert os.getpid() not in pids  # trained in worker processes
    threads = {json.loads(p.read_text())['threads'] for p in (tmp_path / 'archive').rglob('run.json')}
    assert threads == {max(1, (os.cpu_count() or 1) // 2)}  # each job's share of the CPU, as recorded
    assert any(line.startswith('3 runs, 2 at a time') for line in logs)
    # the finished runs are read back, not trained again: without the failing seed the board completes
    values = collect([runs[0], runs[2]], ['32'], log=logs.append, archive=archive, jobs=2, work=fake_work)
    assert values == {('position', 'peg', 'default', '32'): [0.0, 2.0]}
    assert sum(line.startswith('archived:') for line in logs) == 2


def test_no_train_tables_what_the_archive_holds_and_lists_the_rest(tmp_path, monkeypatch, capsys):
    from workbench import leaderboard as cli
    from workbench import leaderboard_runs as lb

    def train_and_evaluate(*args):
        raise AssertionError('--no-train must not train')

    monkeypatch.setattr(lb, 'train_and_evaluate', train_and_evaluate)
    out, archive = tmp_path / 'out', tmp_path / 'archive'
    run = leaderboard_runs({'position': 'vit/vit_tiny_shapes2d_position.py'}, ['peg'], [0], str(out))[0]
    lb.Archive(str(archive), str(out)).store(
        run, _results(['32', '64'], ['default'], value=77.0), dict(train_and_eval_seconds=60.0)
    )
    argv = ['--tasks', 'position', 'relation', '--encodings', 'peg', 'lepe', '--seeds', '0', '--no-train']
    cli.main(
        [
            *argv,
            '--out',
            str(out),
            '--archive',
            str(archive),
            '--models',
            str(tmp_path / 'm'),
            '--resolutions',
            '32',
            '64',
        ]
    )
    printed = capsys.readouterr().out
    assert printed.count('missing (not trained, --no-train)') == 3  # lepe position, peg and lepe relation
    assert '| peg | default | 77.0 | 77.0 |' in printed and '| lepe |' not in printed
    assert 'shapes2d relation' not in printed  # no run of it: no empty table
    assert 'left as it is (--no-train' in printed and not (tmp_path / 'm').exists()
    with pytest.raises(SystemExit, match='no run of this board'):
        cli.main(
            [
                '--tasks',
                'relation',
                '--encodings',
                'peg',
                '--seeds',
                '0',
                '--no-train',
                '--out',
                str(out),
                '--archive',
                str(archive),
                '--models',
                '',
            ]
        )


def test_a_run_records_the_commit_of_the_code_its_process_loaded(tmp_path, monkeypatch):
    """A --jobs worker keeps the code it imported for its first run: every run it trains records that commit, not
    the checkout's when the run ends (HEAD moves on while a queue trains), and says when vispe/ or configs/ had
    uncommitted changes. A run only read from its checkpoint keeps the checkout's commit as before."""
    from workbench import leaderboard_runs as lb

    heads = iter(['1111111', '2222222', '3333333'])
    changed = {'status': ''}

    def git(*args):
        return next(heads) if args[0] == 'rev-parse' else changed['status']

    monkeypatch.setattr(lb, '_git', git)
    monkeypatch.setattr(lb, 'final_checkpoint', lambda run: None)
    lb._loaded_commit.cache_clear()
    runs = leaderboard_runs({'position': 'p.py'}, ['peg'], [0, 1], str(tmp_path / 'out'))
    archive = lb.Archive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    lb.collect(runs, ['32'], log=lambda _: None, archive=archive, work=lambda run, res, log: _results(res, ['default']))
    records = [json.loads((Path(archive.folder(run)) / 'run.json').read_text()) for run in runs]
    assert [r['commit'] for r in records] == ['1111111', '1111111']
    lb._loaded_commit.cache_clear()  # a new process, its tree edited since its commit
    changed['status'] = ' M vispe/encodings/rope.py'
    assert lb._loaded_commit() == '2222222+changes'
    lb._loaded_commit.cache_clear()
    archive.store(runs[0], _results(['32'], ['default']), None)  # only read: the record of its training is kept
    assert json.loads((Path(archive.folder(runs[0])) / 'run.json').read_text())['commit'] == '1111111'


def test_an_option_variant_is_a_run_of_its_own_in_a_folder_every_file_system_takes():
    """'rope_dinov3:rescale=none': its cfg-option builds rope_dinov3 without augmentation; its folder has no ':'."""
    from mmengine.registry import init_default_scope

    from vispe.encodings.dinov3 import RoPEDinoV3
    from vispe.experiments.compare import run_config
    from vispe.registry import MODELS
    from workbench.zoo import model_name

    (run,) = leaderboard_runs({'position': 'configs/vit/vit_tiny_shapes2d_position.py'}, ['rope_dinov3:rescale=none'],
                              [0], 'out')  # fmt: skip
    assert run.work_dir == os.path.join('out', 'position', 'rope_dinov3@rescale=none', 'seed0')
    assert run.encoding == 'rope_dinov3:rescale=none'  # the table's row
    assert model_name('position', run.encoding) == 'vit_tiny_rope_dinov3-rescale-none_shapes2d_position'
    init_default_scope('vispe')
    encodings = [m for m in MODELS.build(run_config(run).model).modules() if isinstance(m, RoPEDinoV3)]
    assert encodings and all(e.rescale is None for e in encodings)


def test_an_option_variant_gets_rows_of_its_own(monkeypatch):
    """Both runs' results name the encoding alone ('peg' here, as eval_resolution labels a model); the board keeps
    them apart by the runs' own labels."""
    from workbench import leaderboard_runs as lb

    values = {'peg': 40.0, 'peg:option=1': 60.0}
    monkeypatch.setattr(
        lb, 'train_and_evaluate', lambda run, res, log: _results(res, ['default'], values[run.encoding])
    )
    runs = leaderboard_runs({'position': 'p.py'}, list(values), [0], 'out')
    stats = summarize(lb.collect(runs, ['32']))
    assert {k: v[0] for k, v in stats.items()} == {
        ('position', 'peg', 'default', '32'): 40.0,
        ('position', 'peg:option=1', 'default', '32'): 60.0,
    }


@pytest.mark.parametrize(
    'spec, expected',
    [
        ('loope:order=raster,context=false', [{'type': 'loope', 'order': 'raster', 'context': False}]),
        ('irpe:mode=contextual,on=qkv+peg', [{'type': 'irpe', 'mode': 'contextual', 'on': 'qkv'}, 'peg']),
        ('rope_dinov3:rescale=none', 'rope_dinov3:rescale=none'),
        ('rope_mixed+peg', ['rope_mixed', 'peg']),
    ],
)
def test_a_spec_with_several_options_reaches_the_model_whole(spec, expected):
    """A board's encoding spec goes through --cfg-options, which splits a plain value on its commas: a spec with
    several options must arrive as the encoding list it names, not as two broken names."""
    import shlex

    from vispe.encodings.build import normalize_spec
    from vispe.experiments.compare import Run, encoding_option, run_options

    option = encoding_option(spec)
    run = Run('position', 'vit/vit_tiny_shapes2d_position.py', 'out', [option])
    value = run_options(run)['model.backbone.encoding']
    assert value == expected
    assert normalize_spec(value) == normalize_spec(spec)
    assert shlex.split(shlex.join([option])) == [option]  # the zoo's command line keeps it one argument


def test_the_fuzzy_variant_trains_on_jittered_positions_and_sweeps_grid_sample():
    """'ape_learned@fuzzy' (ViTAR's fuzzy PE) is ape_learned plus the fuzzy sampler, read with grid_sample: its runs
    carry both, and its sweep measures grid_sample beside the table's other strategies (opt-in elsewhere)."""
    from vispe.experiments.compare import Run, encoding_option, run_config, supported_strategies
    from workbench.leaderboard_runs import REGIME_CONFIGS

    fixed = REGIME_CONFIGS['fixed']
    fuzzy, plain = leaderboard_runs({'position': fixed['position']}, ['ape_learned@fuzzy', 'ape_learned'], [0], 'out')
    assert fuzzy.work_dir == os.path.join('out', 'position', 'ape_learned@fuzzy', 'seed0')
    assert run_config(fuzzy).model.backbone.position_sampler['type'] == 'fuzzy'
    assert 'position_sampler' not in run_config(plain).model.backbone
    assert supported_strategies(fuzzy) == ['bicubic', 'bilinear', 'nearest', 'grid_sample']
    assert 'grid_sample' not in supported_strategies(plain)
    spec = Run('position', fixed['position'], 'unused', [encoding_option('ape_learned:strategy=grid_sample')])
    assert supported_strategies(spec) == supported_strategies(fuzzy)  # the variant's strategies are its spec's


def _board_entries() -> list[str]:
    from vispe.encodings import list_encodings
    from workbench.leaderboard import VARIANTS

    return list_encodings(ndim=2) + list(VARIANTS)


@pytest.mark.parametrize('entry', _board_entries())
def test_every_board_entry_has_a_plain_strategy(entry):
    """The tables list each entry with its plain strategy (scales nothing): loope's strategies (interpolate, extend)
    once had none, and its table crashed after its runs had trained."""
    from vispe.experiments.compare import supported_strategies
    from workbench.leaderboard_report import PLAIN
    from workbench.leaderboard_runs import REGIME_CONFIGS

    (run,) = leaderboard_runs({'position': REGIME_CONFIGS['fixed']['position']}, [entry], [0], 'out')
    strategies = supported_strategies(run)
    stats = summarize({('position', entry, s, '32'): [50.0] for s in strategies})
    assert plain_strategy(stats, 'position', entry) in PLAIN


def test_a_task_asked_at_its_training_size_only_tables_its_plain_strategy():
    stats = summarize(
        {
            ('three_cell_loope', 'loope', 'interpolate', '56'): [89.0, 91.0],
            ('three_cell_loope', 'loope', 'extend', '56'): [89.0, 91.0],
            ('three_cell_loope', 'none', 'default', '56'): [16.5, 16.9],
        }
    )
    assert best_strategy(stats, 'three_cell_loope', 'loope', '56') == 'extend'
    table = markdown(stats, 'three_cell_loope', ['56'])
    rows = [line for line in table.splitlines() if line.startswith('| loope') or line.startswith('| none')]
    assert rows == ['| loope | extend | 90.0 ± 1.4 |', '| none | default | 16.7 ± 0.3 |']


def test_the_three_cell_board_tables_each_run_beside_the_paper_with_the_epoch_it_left_chance(
    tmp_path, monkeypatch, capsys
):
    """The Three-Cell table: best first, the paper's counterpart and average, the spread over seeds, and per seed the
    first epoch whose training loss is below 1.5 (read from the archived run.json; 'never', or '?' for a run archived
    without its losses). Its default encodings add the paper's rows the main board lacks: no PE and the 1D sine."""
    from workbench import leaderboard as cli
    from workbench import leaderboard_runs as lb

    def train_and_evaluate(*args):
        raise AssertionError('--no-train must not train')

    monkeypatch.setattr(lb, 'train_and_evaluate', train_and_evaluate)
    out, archive = tmp_path / 'out', tmp_path / 'archive'
    config = {'three_cell_loope': 'vit/vit_tiny_shapes2d_three_cell_loope.py'}
    records = {
        ('none', 0): (16.5, {'1': 1.79, '2': 1.79}),
        ('none', 1): (16.9, {'1': 1.79, '2': 1.6}),
        ('ape_sincos', 0): (100.0, {'1': 1.79, '2': 1.49, '3': 0.2}),
        ('ape_sincos', 1): (98.0, None),
    }
    for (enc, seed), (value, losses) in records.items():
        (run,) = leaderboard_runs(config, [enc], [seed], str(out))
        timing = dict(train_and_eval_seconds=60.0) | ({'train_loss': losses} if losses else {})
        lb.Archive(str(archive), str(out)).store(run, _results(['56'], ['default'], value=value), timing)
    base = ['--tasks', 'three_cell_loope', '--seeds', '0', '1', '--no-train', '--models', '']
    cli.main([*base, '--encodings', 'none', 'ape_sincos', '--out', str(out), '--archive', str(archive)])
    printed = capsys.readouterr().out
    table = printed.split("beside the paper's averages")[1]
    rows = [line for line in table.splitlines() if line.startswith('| `')]
    assert rows == [
        '| `ape_sincos` | 2D sine (77.1) | 99.0 ± 1.4 | 2 | 2, ? |',
        '| `none` | no PE (59.4) | 16.7 ± 0.3 | 2 | never, never |',
    ]
    with pytest.raises(SystemExit, match='no run of this board'):  # no --encodings, nothing archived
        cli.main([*base, '--out', str(tmp_path / 'defaults'), '--archive', str(tmp_path / 'empty')])
    missing = capsys.readouterr().out
    assert 'three_cell_loope/none/seed0' in missing and 'loope@order=raster,context=false/seed1' in missing
    assert 'three_cell_loope/rope_mixed/seed0' in missing and 'ape_learned@fuzzy/seed0' in missing
