"""The model zoo: export of a finished run into models/<name>/, and the shipped models themselves."""

import json
import os

import pytest
import torch
from mmengine.registry import init_default_scope

from vispe.engine.checkpoint import load_checkpoint
from vispe.engine.config import load_config
from vispe.engine.config_record import RECORD_KEY, config_record, recorded_config
from vispe.experiments.compare import Run
from vispe.files import sha256
from vispe.registry import MODELS
from vispe.sweeps import resolution as R
from workbench.leaderboard_report import summarize
from workbench.zoo import shipped_models, write_model_zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = 'configs/vit/vit_tiny_shapes2d_position.py'
MODELS_DIR = os.path.join(ROOT, 'models')
SHIPPED = shipped_models(MODELS_DIR)


def _fake_finished_run(tmp_path, encoding='rope_axial', seed=0):
    """A work dir as tools/train.py + eval_resolution.py leave it: dumped config, full checkpoint, results."""
    init_default_scope('vispe')
    cfg = load_config(os.path.join(ROOT, CONFIG), {'model.backbone.encoding': encoding})
    cfg.work_dir = str(tmp_path / 'run')
    model = MODELS.build(cfg.model)
    work_dir = tmp_path / 'run'
    (work_dir / 'eval').mkdir(parents=True)
    cfg.dump(str(work_dir / 'vit_tiny_shapes2d_position.py'))
    ckpt = work_dir / 'epoch_30.pth'
    optimizer = torch.optim.AdamW(model.parameters())
    meta = {'epoch': 30, 'iter': 2820, 'seed': seed, 'cfg': cfg.pretty_text, 'dataset_meta': {'classes': ['a']},
            RECORD_KEY: config_record(cfg)}  # fmt: skip
    torch.save({'meta': meta, 'state_dict': model.state_dict(), 'optimizer': optimizer.state_dict()}, ckpt)
    (work_dir / 'last_checkpoint').write_text(str(ckpt))
    rows = [
        {'encoding': encoding, 'strategy': s, 'resolution': r, 'value': v}
        for s, values in (('none', (99.0, 20.0)), ('interpolate', (99.0, 80.0)))
        for r, v in zip((32, 64), values)
    ]
    results = {'config': CONFIG, 'checkpoint': str(ckpt), 'train_resolution': 32, 'metric': 'accuracy', 'results': rows}
    (work_dir / 'eval' / 'results.json').write_text(json.dumps(results))
    run = Run('position', CONFIG, str(work_dir), [f'model.backbone.encoding={encoding}', f'randomness.seed={seed}'])
    run.encoding, run.seed = encoding, seed
    return run, model, rows


def test_export_writes_a_slim_checkpoint_config_metrics_and_card(tmp_path):
    run, model, rows = _fake_finished_run(tmp_path)
    stats = summarize({('position', 'rope_axial', r['strategy'], str(r['resolution'])): [r['value']] for r in rows})
    plot = tmp_path / 'plot.png'
    plot.write_bytes(b'png')
    out = tmp_path / 'models'
    (out / 'feature_net').mkdir(parents=True)  # a shipped model that is not on the leaderboard
    other = {'task': 'shape_color', 'encoding': 'ape_sincos', 'role': 'FD features'}
    (out / 'feature_net' / 'metrics.json').write_text(json.dumps(other))
    (folder,) = write_model_zoo([run], 0, stats, ['32', '64'], '| the table |', str(plot), str(out))
    name = 'vit_tiny_rope_axial_shapes2d_position'
    assert folder == str(out / name)
    # the checkpoint: weights and provenance only, loadable without any allow-list
    slim = torch.load(out / name / f'{name}.pth', weights_only=True)
    assert set(slim) == {'meta', 'state_dict'} and 'cfg' not in slim['meta'] and slim['meta']['epoch'] == 30
    assert all(torch.equal(slim['state_dict'][k], v) for k, v in model.state_dict().items())
    # the config builds the same model without a work_dir from the training machine
    config_text = (out / name / 'config.py').read_text()
    assert 'work_dir' not in config_text
    cfg = load_config(str(out / name / 'config.py'))
    assert recorded_config(slim, 'slim', '').model == cfg.model  # the config as data, read back without running it
    load_checkpoint(str(out / name / f'{name}.pth'), MODELS.build(cfg.model), strict=True)
    metrics = json.loads((out / name / 'metrics.json').read_text())
    assert metrics['sha256'] == sha256(str(out / name / f'{name}.pth'))
    assert metrics['results'] == rows and metrics['params'] == sum(p.numel() for p in model.parameters())
    card = (out / name / 'README.md').read_text()
    assert '| rope_axial | interpolate | 99.0 | 80.0 |' in card
    assert f'tools/eval_resolution.py models/{name}/config.py models/{name}/{name}.pth --resolutions 32 64' in card
    assert 'best strategy `interpolate`: 99.0 ± 0.0 at 32 px, 80.0 ± 0.0 at 64 px' in card
    index = (out / 'README.md').read_text()
    assert '| the table |' in index
    assert f'| [{name}]({name}/README.md) | position | rope_axial | interpolate | 99.0 | 80.0 |' in index
    assert '| [feature_net](feature_net/README.md) | shape_color | ape_sincos | FD features |' in index
    assert index.count(f'[{name}]({name}/README.md)') == 1  # a leaderboard model is not listed again
    assert (out / 'leaderboard.png').read_bytes() == b'png'


def test_export_needs_the_final_checkpoint(tmp_path):
    run, _, rows = _fake_finished_run(tmp_path)
    os.remove(os.path.join(run.work_dir, 'epoch_30.pth'))
    stats = summarize({('position', 'rope_axial', r['strategy'], str(r['resolution'])): [r['value']] for r in rows})
    with pytest.raises(FileNotFoundError, match='no final checkpoint'):
        write_model_zoo([run], 0, stats, ['32', '64'], '', 'plot.png', str(tmp_path))


@pytest.mark.parametrize('name', sorted(SHIPPED))
def test_shipped_model_matches_its_card(name):
    """Every model in models/ has the checkpoint its metrics name (sha256) and loads strictly into its config."""
    metrics = SHIPPED[name]
    folder = os.path.join(MODELS_DIR, name)
    ckpt = os.path.join(folder, metrics['checkpoint'])
    assert sha256(ckpt) == metrics['sha256']
    init_default_scope('vispe')
    cfg = load_config(os.path.join(folder, 'config.py'))
    encoding = cfg.model.backbone.encoding  # a name, or a dict pinning options a default no longer gives (lff)
    assert (encoding['type'] if isinstance(encoding, dict) else encoding) == metrics['encoding']
    model = MODELS.build(cfg.model)
    load_checkpoint(ckpt, model, strict=True)
    assert sum(p.numel() for p in model.parameters()) == metrics['params']


@pytest.mark.skipif('vit_tiny_rope_axial_shapes2d_position' not in SHIPPED, reason='model zoo not exported')
def test_shipped_model_reproduces_its_numbers():
    """Evaluating a shipped checkpoint gives the accuracy on its card (a sample or two may flip across BLAS builds)."""
    name = 'vit_tiny_rope_axial_shapes2d_position'
    metrics = SHIPPED[name]
    folder = os.path.join(MODELS_DIR, name)
    cfg = load_config(os.path.join(folder, 'config.py'))
    ckpt = os.path.join(folder, metrics['checkpoint'])
    got = R.sweep(cfg, ckpt, [32, 64], ['interpolate'], 'cpu', show_progress=False)
    card = {(r['strategy'], r['resolution']): r['value'] for r in metrics['results']}
    for row in got['results']:
        assert row['value'] == pytest.approx(card[(row['strategy'], row['resolution'])], abs=0.3)
