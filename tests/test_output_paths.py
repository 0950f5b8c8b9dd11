"""Output paths that destroy files (issue 38, "no quiet wrong number"): every report writer goes through
vispe.evaluation.outputs. Default names carry the run's settings hash; a file a tool did not write (a checkpoint, a
user's JSON, another run's report) is never replaced without --force, and a file of another format never; a
training run leaves a user's file named like its config dump alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_benchmark import load_tool
from test_protected_runs import runner
from test_report import compare_results, refusal, results_file
from test_tools import tiny_config

from vispe.engine.workdir import CONFIG_DUMP_MARK, WorkDirError
from vispe.evaluation import outputs

TINY = ['--model', 'vit_tiny_patch16_224', '--img-size', '32', '--batch-size', '1', '--warmup', '0', '--repeats', '1']
TINY += ['--model-kwargs', 'depth=1', 'embed_dim=32', 'num_heads=2']


def bench(*args: str) -> int:
    return load_tool().main([*TINY, *args])


def test_two_benchmark_runs_with_other_encodings_keep_both_files(tmp_path, monkeypatch, capsys) -> None:
    """Before: both wrote outputs/benchmark/vit_tiny_patch16_224_32_model.json, the second over the first."""
    monkeypatch.chdir(tmp_path)
    assert bench('--encodings', 'rope_axial') == 0
    assert bench('--encodings', 'rope_mixed') == 0
    files = sorted((tmp_path / 'outputs' / 'benchmark').glob('*.json'))
    assert len(files) == 2, files
    rows = {tuple(r['encoding'] for r in json.loads(f.read_text())['results']) for f in files}
    assert rows == {('ape_learned', 'rope_axial'), ('ape_learned', 'rope_mixed')}
    assert all(f.name.startswith('vit_tiny_patch16_224_32_model_') for f in files)  # + the settings hash


def test_out_over_a_checkpoint_is_refused_exit_2_and_left_byte_for_byte(tmp_path, capsys) -> None:
    """Before: --out model.pth replaced a training checkpoint with JSON, exit 0."""
    ckpt = tmp_path / 'model.pth'
    ckpt.write_bytes(b'PK\x03\x04\x00\x00binary checkpoint\x00\xff')
    before = ckpt.read_bytes()
    for extra in ([], ['--force']):  # a file that is not JSON is never written over
        assert bench('--encodings', 'rope_axial', '--out', str(ckpt), *extra) == 2
        err = capsys.readouterr().err
        assert str(ckpt) in err and 'not a JSON file' in err and err.count('\n') == 1
        assert ckpt.read_bytes() == before
    named_json = tmp_path / 'weights.json'  # a checkpoint named .json is not JSON either
    named_json.write_bytes(before)
    assert bench('--encodings', 'rope_axial', '--out', str(named_json), '--force') == 2
    assert named_json.read_bytes() == before


def test_a_foreign_json_needs_force(tmp_path, capsys) -> None:
    out = tmp_path / 'mine.json'
    out.write_text('{"my": "numbers"}\n')
    assert bench('--encodings', 'rope_axial', '--out', str(out)) == 2
    assert '--force' in capsys.readouterr().err and out.read_text() == '{"my": "numbers"}\n'
    assert bench('--encodings', 'rope_axial', '--out', str(out), '--force') == 0
    doc = json.loads(out.read_text())
    assert doc['vispe_report'] == 'benchmark' and [r['encoding'] for r in doc['results']][-1] == 'rope_axial'


def test_same_settings_replace_their_own_report_other_settings_need_force(tmp_path, capsys) -> None:
    """The rule: a rerun of the same command replaces its own report; another run's report at the same --out is
    refused without --force."""
    out = tmp_path / 'b.json'
    assert bench('--encodings', 'rope_axial', '--out', str(out)) == 0
    first = json.loads(out.read_text())['vispe_run']
    assert bench('--encodings', 'rope_axial', '--out', str(out)) == 0  # same settings: its own file
    assert json.loads(out.read_text())['vispe_run'] == first
    kept = out.read_bytes()
    assert bench('--encodings', 'rope_mixed', '--out', str(out)) == 2
    assert 'another run' in capsys.readouterr().err and out.read_bytes() == kept
    assert bench('--encodings', 'rope_mixed', '--out', str(out), '--force') == 0
    assert json.loads(out.read_text())['vispe_run'] != first


def test_compare_results_refuses_a_foreign_file_and_force_replaces_it(tmp_path, capsys) -> None:
    """Before: comparison.json of --out DIR was replaced whatever it held."""
    a = results_file(tmp_path / 'a', 'rope', {32: 90.0})
    b = results_file(tmp_path / 'b', 'rope', {32: 80.0})
    out = tmp_path / 'cmp'
    out.mkdir()
    (out / 'comparison.json').write_text('{"mine": 1}')
    assert 'comparison.json' in refusal(capsys, a, b, '--out', str(out))
    assert (out / 'comparison.json').read_text() == '{"mine": 1}' and not (out / 'comparison.md').exists()
    compare_results().main([a, b, '--out', str(out), '--force'])
    compare_results().main([a, b, '--out', str(out)])  # the same comparison again: its own files
    assert json.loads((out / 'comparison.json').read_text())['vispe_report'] == 'comparison'
    c = results_file(tmp_path / 'c', 'rope', {32: 70.0})
    assert 'another run' in refusal(capsys, a, c, '--out', str(out))  # another comparison's files need --force


def test_user_file_named_like_the_config_dump_is_left_intact(tmp_path) -> None:
    """Before: training into a work dir holding the user's tiny.py replaced it with mmengine's config dump."""
    # dump.py, not tiny.py: a Runner of another test's tiny.py in the same second would share mmengine's message hub
    config = tiny_config(tmp_path, name='dump.py')  # the run's dump is <work_dir>/dump.py
    work = tmp_path / 'work'
    work.mkdir()
    mine = work / 'dump.py'
    mine.write_text('# my notes, not a config dump\nlr = 1\n')
    with pytest.raises(WorkDirError, match=r'holds dump\.py.*move dump\.py away'):
        runner(config, work)
    assert mine.read_text() == '# my notes, not a config dump\nlr = 1\n'
    assert not any(p.suffix == '.pth' for p in work.iterdir())


def test_a_runs_own_config_dump_is_replaced_by_the_next_run(tmp_path) -> None:
    config = tiny_config(tmp_path, name='dump.py')
    work = tmp_path / 'work'
    runner(config, work).train()
    dumped = (work / 'dump.py').read_text()
    assert dumped.startswith(CONFIG_DUMP_MARK)
    runner(config, work, overwrite_work_dir=True)  # vispe's own copy is no obstacle


@pytest.mark.parametrize(
    ('name', 'content', 'kind'),
    [('summary.md', b'# my notes\n', 'summary'), ('plot.png', b'\x89PNG\r\n\x1a\n....', 'figure')],
)
def test_text_and_figures_follow_the_same_rule(tmp_path, name, content, kind) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(outputs.OutputConflict, match='--force'):
        outputs.check_target(path, kind)
    outputs.check_target(path, kind, force=True)  # same format: --force may replace it
    path.write_bytes(b'\x00\x01binary')
    with pytest.raises(outputs.OutputConflict, match='another --out'):
        outputs.check_target(path, kind, force=True)  # another format: never


def test_own_text_and_figures_are_recognised(tmp_path) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    md = outputs.write_text(tmp_path / 'summary.md', '| a |\n', 'summary')
    outputs.check_target(md, 'summary')  # its own: no conflict
    fig = plt.figure()
    png = outputs.save_figure(fig, tmp_path / 'p.png')
    plt.close(fig)
    outputs.check_target(png, 'figure')
    assert Path(png).read_bytes().startswith(b'\x89PNG') and os.path.getsize(png) > 0
