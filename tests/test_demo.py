"""The README's demo (vispe/cli/demo.py) on tiny runs: one progress line on the terminal while each run's own output
goes to its log file, and a conclusion written from the numbers; RunsProgress's ETA."""

import io

import pytest

from vispe.cli import demo
from vispe.experiments import progress as progress_module
from vispe.experiments.progress import EVAL_SHARE, RunsProgress


def rows(values):
    """Result rows from {(encoding, strategy): (at 32, at 64)}."""
    return [
        dict(encoding=enc, strategy=strat, resolution=[size, size], value=v)
        for (enc, strat), pair in values.items()
        for size, v in zip((32, 64), pair)
    ]


def test_the_conclusion_says_what_the_numbers_show():
    got = demo.conclusion(
        rows(
            {
                ('ape_learned', 'bicubic'): (75.3, 40.0),
                ('rope_axial', 'none'): (99.0, 14.0),
                ('rope_axial', 'interpolate'): (99.0, 85.0),
                ('rope_mixed', 'none'): (100.0, 19.6),
                ('rope_mixed', 'interpolate'): (100.0, 87.0),
            }
        ),
        100 / 27,
    )
    assert 'the rotary models reach 99-100% and the learned table 75% (chance: 3.7%)' in got
    assert 'At 64 px, RoPE with its positions as they are (none) gets 14-20%' in got
    assert 'rescaled onto the training range (interpolate) 85-87%; the learned table, resampled, gets 40%' in got
    assert 'only when its positions are rescaled, and then better than a resampled learned table' in got
    worse = demo.conclusion(
        rows(
            {
                ('ape_learned', 'bicubic'): (75.0, 40.0),
                ('rope_axial', 'none'): (99.0, 50.0),
                ('rope_axial', 'interpolate'): (99.0, 30.0),
                ('rope_mixed', 'none'): (99.0, 50.0),
                ('rope_mixed', 'interpolate'): (99.0, 30.0),
            }
        ),
        None,
    )
    assert 'rescaling did not clearly help' in worse and 'better than' not in worse  # never a claim the numbers deny
    assert demo.conclusion(rows({('rope_axial', 'none'): (99.0, 50.0)}), None).startswith('Some results are missing')


def test_the_eta_counts_the_iterations_and_evaluations_left(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_module.time, 'monotonic', lambda: now[0])

    class Quiet:
        def isatty(self):
            return False

        def write(self, text):
            pass

        def flush(self):
            pass

    line = RunsProgress(['a', 'b'], stream=Quiet())
    assert line.eta() is None  # nothing timed yet
    line.training(0, 100)
    now[0] = 10.0
    line.training(50, 100)  # 0.2 s an iteration
    assert line.eta() == pytest.approx((50 + 100) * 0.2 + 2 * EVAL_SHARE * 100 * 0.2)
    now[0] = 20.0
    line.training(100, 100)
    line.evaluating()
    now[0] = 26.0  # the first evaluation took 6 s: the next one is counted at that
    line.end_evaluation()
    line.evaluated[0] = True
    line.index = 1
    assert line.eta() == pytest.approx(100 * 0.2 + 6.0)


@pytest.mark.slow
def test_the_demo_shows_one_progress_line_and_sends_each_runs_output_to_its_log(tmp_path, monkeypatch, capsys):
    from test_tools import tiny_config

    for enc in demo.ENCODINGS:
        tiny_config(tmp_path, encoding=enc, samples=16, name=f'{enc}.py')
    monkeypatch.setattr(demo, 'CONFIG', str(tmp_path / '{}.py'))
    monkeypatch.setattr(demo, 'EPOCHS', 2)
    monkeypatch.setattr(demo, 'RESOLUTIONS', ['32', '64'])
    out = tmp_path / 'out'
    demo.main(['--out', str(out)])
    shown = capsys.readouterr().out
    assert 'run 1 of 3 (ape_learned)' in shown and 'run 3 of 3 (rope_mixed)' in shown and 'all 3 runs done' in shown
    assert 'mmengine' not in shown and 'Epoch(train)' not in shown  # mmengine's dump and logs: in the log files
    for enc in demo.ENCODINGS:
        log = (out / enc / 'console.log').read_text()
        assert 'Epoch(train)' in log and 'System environment' in log
    summary = (out / 'summary.md').read_text()
    assert summary.strip() in ' '.join(shown.split()) or summary.split('.')[0] in shown
    assert summary.startswith('At the training size (32 px)') and (out / 'summary_position.png').is_file()
    demo.main(['--out', str(out)])  # again: the finished runs and the demo's own summary files are reused
    again = capsys.readouterr().out
    assert 'all 3 runs done' in again and (out / 'summary.md').read_text() == summary


def test_a_run_that_fails_says_where_it_stopped_and_where_its_output_is(tmp_path):
    shown = io.StringIO()
    line = RunsProgress(['a', 'b'], stream=shown)
    log = tmp_path / 'a' / 'console.log'
    with pytest.raises(RuntimeError, match='diverged'):
        with line.run(0, str(log)):
            print('what mmengine said')
            raise RuntimeError('diverged')
    line.close()
    last = shown.getvalue().splitlines()[-1]
    assert last.startswith('stopped in run 1 of 2 (a) after') and last.endswith(f'its output: {log}')
    assert 'what mmengine said' in log.read_text() and 'what mmengine said' not in shown.getvalue()


def test_a_file_of_the_users_in_the_way_stops_the_demo_before_it_trains(tmp_path, capsys, monkeypatch):
    (tmp_path / 'summary.md').write_text('my notes')
    monkeypatch.setattr(demo, 'compare', lambda *a, **k: pytest.fail('trained although a file was in the way'))
    with pytest.raises(SystemExit) as stop:
        demo.main(['--out', str(tmp_path)])
    assert stop.value.code == 2 and 'summary.md' in capsys.readouterr().err
    assert (tmp_path / 'summary.md').read_text() == 'my notes'
