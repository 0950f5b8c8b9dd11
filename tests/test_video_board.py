"""The video block of the leaderboard: its runs and their options, the statistics over seeds, each encoding's plain
and best strategy, and the files the command writes (training and sweeps replaced by recorded rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vispe.engine.config import load_config
from vispe.experiments.compare import run_config
from workbench import leaderboard_video
from workbench import video_board as V

#: a run's sweep: value per (encoding, strategy, sweep, factor), the seed adding to it
SWEEP = {
    ('rope_axial', 'none'): {('frames', 0.5): 80.0, ('frames', 1.0): 99.0, ('frames', 2.0): 90.0, ('size', 2.0): 60.0},
    ('rope_axial', 'interpolate'): {
        ('frames', 0.5): 85.0, ('frames', 1.0): 99.0, ('frames', 2.0): 97.0, ('size', 2.0): 70.0
    },
    ('ape_learned', 'bicubic'): {
        ('frames', 0.5): 70.0, ('frames', 1.0): 98.0, ('frames', 2.0): 75.0, ('size', 2.0): 50.0
    },
}  # fmt: skip


def fake_sweep(run, sweep, log=print) -> dict:
    rows = [
        dict(encoding=enc, strategy=strat, sweep=part, setting=0, factor=factor, value=value + run.seed)
        for (enc, strat), cells in SWEEP.items()
        if enc == run.encoding
        for (part, factor), value in cells.items()
    ]
    rows.append(dict(rows[1], sweep='size', factor=1.0))  # the training size: the same setting as 1x frames
    return {'results': rows}


def test_runs_set_the_task_the_head_and_the_seed() -> None:
    runs = V.board_runs(['half'], ['mrope'], [0, 2], 'out', epochs=4)
    assert [r.work_dir for r in runs] == ['out/half/mrope/seed0', 'out/half/mrope/seed2']
    cfg = run_config(runs[1])
    assert cfg.model.backbone.encoding == 'mrope' and cfg.model.backbone.num_classes == 2
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.task == 'half'
    assert cfg.randomness.seed == 2 and cfg.train_cfg.max_epochs == 4
    assert load_config(V.CONFIG).model.backbone.num_classes == 4  # direction, the config's own
    with pytest.raises(ValueError, match="unknown ShapesVideo task 'size'"):
        V.task_options('size')


def test_the_board_ranks_each_encoding_by_its_plain_and_best_strategy(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(V, 'train_and_sweep', fake_sweep)
    out = tmp_path / 'board'
    leaderboard_video.main(['--encodings', 'rope_axial', 'ape_learned', '--seeds', '0', '2', '--out', str(out)])
    stats = json.loads((out / 'leaderboard.json').read_text())['results']
    cell = next(
        r for r in stats if r['encoding'] == 'rope_axial' and r['strategy'] == 'none' and r['column'] == '2x frames'
    )
    assert cell['mean'] == 91.0 and cell['seeds'] == 2 and cell['std'] == pytest.approx(2**0.5)  # 90 and 92
    assert not any(r['column'] == '1x size' for r in stats)  # the training setting once
    text = (out / 'leaderboard.md').read_text()
    header = text.splitlines()[2]
    assert header.startswith('| encoding | strategy | 1x frames | 0.5x frames | 2x frames | 2x size |')
    assert '| rope_axial | interpolate (best) |' in text and '| rope_axial | none |' in text
    assert '| ape_learned | bicubic |' in text and 'bicubic (best)' not in text
    assert (out / 'leaderboard.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


#: a run's real sweep, committed with the board (rope_axial on direction, seed 0): every default column and strategy
COMMITTED = Path(__file__).parents[1] / 'results/leaderboard_video/direction/rope_axial/seed0/results.json'


def archived_run(tmp_path, results: dict):
    """The rope_axial seed-0 run of a board in tmp_path/out, ``results`` in the archive tmp_path/archive."""
    run = V.board_runs(['direction'], ['rope_axial'], [0], str(tmp_path / 'out'))[0]
    archive = V.VideoArchive(str(tmp_path / 'archive'), str(tmp_path / 'out'))
    folder = tmp_path / 'archive' / 'direction' / 'rope_axial' / 'seed0'
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'results.json').write_text(json.dumps(results))
    return run, archive


def test_the_archive_serves_a_complete_sweep_labelled_and_refuses_a_partial_one(tmp_path) -> None:
    sweep = json.loads(COMMITTED.read_text())
    run, archive = archived_run(tmp_path, sweep)
    loaded = archive.load(run, [])
    assert loaded is not None and len(loaded['results']) == len(sweep['results']) - 4  # 4 strategies' 1x size rows
    assert {row['resolution'] for row in loaded['results']} == V.DEFAULT_COLUMNS
    assert V.labelled(loaded) == loaded  # labelling twice changes nothing
    rows = sweep['results']
    for partial in (
        dict(sweep, complete=False),  # a failed cell
        dict(sweep, results=[r for r in rows if r['strategy'] != 'ntk']),  # a strategy the model has
        dict(sweep, results=[r for r in rows if r['factor'] != 4.0]),  # a column
    ):
        run, archive = archived_run(tmp_path, partial)
        assert archive.load(run, []) is None


def test_a_board_with_an_archive_trains_only_the_runs_it_lacks(monkeypatch, tmp_path) -> None:
    sweep = json.loads(COMMITTED.read_text())
    trained = []

    def real_sweep(run, _sweep, log=print) -> dict:
        trained.append(run.seed)
        return dict(sweep, results=[dict(row, value=row['value'] - run.seed) for row in sweep['results']])

    monkeypatch.setattr(V, 'train_and_sweep', real_sweep)
    archive = str(tmp_path / 'archive')
    first, _ = V.board(['direction'], ['rope_axial'], [0, 1], str(tmp_path / 'out'), log=print, archive=archive)
    assert trained == [0, 1] and (tmp_path / 'archive' / 'direction' / 'rope_axial' / 'seed1' / 'run.json').is_file()
    # another machine: no work folder, nothing trains, the archive answers with the same statistics
    again, _ = V.board(['direction'], ['rope_axial'], [0, 1], str(tmp_path / 'new'), train=False, archive=archive)
    assert trained == [0, 1] and again == first
    assert first[('direction', 'rope_axial', 'none', '4x frames')][2] == 2  # both seeds in each cell
