"""The patch-shift sweep (vispe.sweeps.patch_shift, ``vispe eval-patch-shift``) on tiny untrained checkpoints, and
the SWEEPS registry driving compare-results and the ``vispe`` command listing.

What can fail here: shift 0 must be the resolution sweep's cell at the training size (same model, data and
evaluator); a roll by a whole patch must leave a model without any position signal exactly where it was (and must
not for a learned absolute table); rows are keyed by (encoding, direction, shift) and a rerun reuses them; a sweep
registered in a test must reach merge and the command line with no other edit."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from test_resumable_sweeps import save_model
from test_tools import tiny_config

from vispe import cli
from vispe.cli import compare_results
from vispe.engine.config import load_config
from vispe.evaluation.trained_model import load_model
from vispe.sweeps import merge
from vispe.sweeps import patch_shift as S
from vispe.sweeps import resolution as R
from vispe.sweeps.engine import SweepConflict
from vispe.sweeps.registry import SWEEPS, SweepKind
from vispe.sweeps.settings import settings_loader
from vispe.tasks.classification import ImageClassifier


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    """{'ape': (cfg, ckpt), 'none': (cfg, ckpt)}: a tiny ViT (32 px, patch 4) with a learned absolute table, and
    one without any encoding (no position signal at all)."""
    tmp = tmp_path_factory.mktemp('shift')
    path = tiny_config(tmp)
    ape = load_config(path)
    none = load_config(path, {'model.backbone.encoding': 'none'})
    return {'ape': (ape, save_model(ape, tmp / 'ape.pth')), 'none': (none, save_model(none, tmp / 'none.pth', 1))}


def shift_sweep(cfg, ckpt, shifts, directions=('x',), **kwargs):
    return S.sweep(cfg, ckpt, shifts, list(directions), 'cpu', show_progress=False, **kwargs)


def values(results) -> dict[tuple[str, float], float]:
    return {(r['direction'], r['shift']): r['value'] for r in results['results']}


def test_shift_zero_is_the_resolution_sweeps_cell_at_the_training_size(models, monkeypatch):
    """The same images reach the same model: what the resolution sweep's 32 px cell feeds test_step, shift 0 feeds
    too, and shift 1/2 feeds them rolled 2 px (half a 4 px patch) to the right."""
    seen: list[torch.Tensor] = []
    test_step = ImageClassifier.test_step

    def recording(self, data):
        seen.append(data['inputs'].clone())
        return test_step(self, data)

    monkeypatch.setattr(ImageClassifier, 'test_step', recording)
    cfg, ckpt = models['ape']
    plain = R.sweep(cfg, ckpt, [32], ['bicubic'], 'cpu', show_progress=False)
    fed = torch.cat(seen)
    seen.clear()
    shifted = shift_sweep(cfg, ckpt, [0.0, 0.5])
    assert shifted['sweep'] == 'patch_shift' and shifted['complete']
    assert shifted['train_resolution'] == plain['train_resolution'] == 32
    assert values(shifted)[('x', 0.0)] == plain['results'][0]['value']
    assert [r['pixels'] for r in shifted['results']] == [[0, 0], [0, 2]]
    zero, half = torch.cat(seen).split(len(fed))
    assert len(fed) == 32 and torch.equal(zero, fed)
    assert torch.equal(half, torch.roll(fed, 2, dims=-1)) and not torch.equal(half, fed)


def test_a_whole_patch_roll_moves_patches_only_a_model_without_positions_cannot_tell(models):
    """A roll by one patch permutes the patch tokens: the logits of a ViT without any encoding stay the same, those
    of a learned absolute table change; the sweep's accuracy at shift 1 then equals shift 0 in every direction."""
    for name, same in (('none', True), ('ape', False)):
        cfg, ckpt = models[name]
        model, _ = load_model(cfg, ckpt, 'cpu')
        batch = model.data_preprocessor(next(iter(settings_loader(cfg, {}))), False)
        with torch.no_grad():
            logits = model(batch['inputs'], mode='tensor')
            for direction in S.DIRECTIONS:
                rolled = S.roll_view(S.roll_pixels(1.0, direction, (4, 4))).apply(batch['inputs'])
                assert rolled.shape == batch['inputs'].shape and not torch.equal(rolled, batch['inputs'])
                close = torch.allclose(model(rolled, mode='tensor'), logits, atol=1e-5)
                assert close == same, (name, direction)
    results = shift_sweep(*models['none'], [0.0, 1.0], S.DIRECTIONS)
    got = values(results)
    assert all(got[(d, 1.0)] == got[(d, 0.0)] for d in S.DIRECTIONS)
    assert [r['pixels'] for r in results['results'] if r['shift'] == 1.0] == [[0, 4], [4, 0], [4, 4]]


def test_rows_are_keyed_resumable_and_merge_into_one_table(models, tmp_path, capsys):
    cfg, ckpt = models['ape']
    out = str(tmp_path / 'a' / 'eval')
    with pytest.raises(SystemExit) as done:  # through the registry's command: vispe eval-patch-shift
        cli.main(['eval-patch-shift', cfg.filename, ckpt, '--shifts', '0', '0.25', '--directions', 'y', '--out', out])
    assert done.value.code is None and os.path.isfile(os.path.join(out, 'results.png'))
    assert '0.25' in capsys.readouterr().out
    logged: list[str] = []
    again = shift_sweep(cfg, ckpt, [0.0, 0.25, 0.5], ['y'], out_dir=out, log=logged.append)
    assert any('reusing 2 of 3' in line for line in logged)
    assert [(r['direction'], r['shift']) for r in again['results']] == [('y', 0.0), ('y', 0.25), ('y', 0.5)]
    with pytest.raises(SweepConflict, match='another checkpoint'):
        shift_sweep(*models['none'], [0.0], ['y'], out_dir=out)
    with pytest.raises(SweepConflict, match='another sweep'):
        R.sweep(cfg, ckpt, [32], ['bicubic'], 'cpu', show_progress=False, out_dir=out)

    other = tmp_path / 'b' / 'eval'
    shutil.copytree(out, other)
    doc = json.loads((other / 'results.json').read_text())  # another run's results: its own checkpoint
    (other / 'results.json').write_text(json.dumps(dict(doc, checkpoint_sha256='another run')))
    compare_results.main([os.path.join(out, 'results.json'), str(other / 'results.json'), '--out', str(tmp_path / 'c')])
    table = (tmp_path / 'c' / 'comparison.md').read_text().splitlines()
    assert table[0] == '| run | encoding | direction | 0 | 0.25 | 0.5 |'
    assert [line.split(' | ')[0] for line in table[2:4]] == ['| a', '| b']
    assert json.loads((tmp_path / 'c' / 'comparison.json').read_text())['sweep'] == 'patch_shift'


def test_a_sweep_registered_anywhere_reaches_merge_and_the_command_line(capsys):
    """No table in merge or vispe.cli names the kinds: registering one is all it takes, and removing it takes it
    away again."""
    called = []
    dummy = SweepKind(
        name='dummy',
        run=lambda *a, **k: {},
        plot=lambda results, path: path,
        fields=('encoding',),
        column=lambda row: f'{row["knob"]}',
        order=int,
        xlabel='knob',
        command='eval-dummy',
        about='a sweep that only a test knows',
        main=lambda argv, prog: called.append((argv, prog)),
    )
    doc = {
        'sweep': 'dummy',
        'metric': 'accuracy',
        'results': [{'encoding': 'e', 'knob': k, 'value': k} for k in (10, 2)],
    }
    with pytest.raises(merge.NotComparable, match='no known sweep kind'):
        merge.merge([doc], ['a'])
    SWEEPS.add(dummy)
    try:
        with pytest.raises(ValueError, match='clashes with the registered sweep'):
            SWEEPS.add(dummy)
        assert 'eval-dummy' in cli.usage() and 'a sweep that only a test knows' in cli.usage()
        cli.main(['eval-dummy', '--knob', '3'])
        assert called == [(['--knob', '3'], 'vispe eval-dummy')]
        kind, table, metric = merge.merge([doc], ['a'])
        assert (kind, table.columns, metric) == ('dummy', ['2', '10'], 'accuracy')
    finally:
        SWEEPS.remove('dummy')
    assert 'eval-dummy' not in cli.usage()
    with pytest.raises(SystemExit, match="unknown command 'eval-dummy'"):
        cli.main(['eval-dummy'])
    assert list(SWEEPS)[:5] == ['resolution', 'points', 'video', 'cameras', 'generation']


def test_a_task_whose_label_moves_with_the_image_is_warned_about(models):
    """Before: eval-patch-shift on Shapes2D 'position' (the label is the shape's cell) ran without a word, though a
    shift changes the right answer itself."""
    cfg, ckpt = models['ape']
    assert cfg.test_dataloader.dataset.get('task', 'position') == 'position'
    said: list[str] = []
    shift_sweep(cfg, ckpt, [0.5], log=said.append)
    assert any(line.startswith("warning: the 'position' task's label says where things lie") for line in said)
    relation = load_config(cfg.filename, {'test_dataloader.dataset.task': 'relation', 'model.backbone.num_classes': 4})
    assert S.label_moves(relation) is None
