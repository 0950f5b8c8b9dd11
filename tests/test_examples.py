"""The scripts in examples/ run as examples/README.md shows them, at tiny sizes, and do what they say: the fine-tuned
model learns and reloads, the sweep writes its table and plot, a mixed batch gives each image its own output."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from PIL import Image

import vispe

EXAMPLES = Path(ROOT) / 'examples'


def example(name: str):
    """The example script ``name`` as a module (its ``main(argv)`` runs it as the command line would)."""
    spec = importlib.util.spec_from_file_location(f'example_{name}', EXAMPLES / f'{name}.py')
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bars_folder(root: Path) -> Path:
    """An ImageFolder tree of two classes, horizontal and vertical bars in random colours, periods and sizes."""
    rng = np.random.default_rng(0)
    for split, count in (('train', 16), ('val', 8)):
        for label in ('horizontal', 'vertical'):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                h, w = (int(s) for s in rng.integers(32, 56, size=2))
                period = int(rng.integers(6, 12))
                along = np.arange(h)[:, None] if label == 'horizontal' else np.arange(w)[None, :]
                bars = np.broadcast_to((along + rng.integers(period)) // (period // 2) % 2, (h, w))
                pixels = bars[..., None] * rng.integers(60, 255, size=3) + rng.normal(0, 10, (h, w, 3))
                Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f'{i}.png')
    return root


def test_the_readme_lists_every_example_with_a_command_that_names_it():
    scripts = sorted(p.name for p in EXAMPLES.glob('*.py'))
    readme = (EXAMPLES / 'README.md').read_text()
    assert len(scripts) == 3
    for script in scripts:
        assert f'.venv/bin/python examples/{script}' in readme, script
        assert len((EXAMPLES / script).read_text().splitlines()) <= 80, f'{script}: an example stays short'


@pytest.mark.filterwarnings('ignore')  # a tiny ImageFolder is used with a warning saying so
def test_finetune_imagefolder_learns_and_its_weights_reload(tmp_path):
    """The loss falls over four epochs, and the saved weights rebuild through the call the script prints, giving
    the same validation accuracy."""
    from vispe.datasets import ImageFolderDataset

    root = bars_folder(tmp_path / 'bars')
    out = tmp_path / 'finetuned.pth'
    args = ['--image-size', '32', '--patch-size', '8', '--depth', '2', '--epochs', '4', '--batch-size', '8']
    result = example('finetune_imagefolder').main([str(root), *args, '--lr', '1e-3', '--out', str(out)])
    losses = result['losses']
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses
    assert result['classes'] == ['horizontal', 'vertical']
    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding='rope_mixed', **result['model_args'], checkpoint_path=str(out)
    ).eval()
    val = ImageFolderDataset(root, split='val', image_size=32)
    items = [val[i] for i in range(len(val))]  # (iterating an ImageFolderDataset does not stop at its length)
    with torch.no_grad():
        right = sum(int(model(item['inputs'][None]).argmax()) == item['labels'] for item in items)
    assert 100.0 * right / len(val) == pytest.approx(result['accuracies'][-1])


def test_eval_unseen_sizes_writes_the_sweep_and_its_plot(tmp_path, capsys):
    """A checkpoint trained in two tiny epochs, evaluated at a smaller, the training and a larger size under two
    strategies: every cell in results.json, a PNG beside it, and the two strategies agree at the training size."""
    from vispe.engine.train import train

    options = {
        'model.backbone.encoding': 'rope_mixed',
        'model.backbone.embed_dim': 32,
        'model.backbone.depth': 2,
        'train_dataloader.dataset.num_samples': 64,
        'train_dataloader.batch_size': 16,
        'val_dataloader.dataset.num_samples': 32,
        'test_dataloader.dataset.num_samples': 32,
        'train_cfg.max_epochs': 2,
    }
    work = tmp_path / 'run'
    train('vit/vit_tiny_shapes2d_relation.py', str(work), options)
    (config,) = work.glob('*.py')  # the run's copy of its config, options applied
    out = tmp_path / 'eval'
    args = [str(config), str(work / 'epoch_2.pth'), '--sizes', '16', '32', '48x32', '--out', str(out)]
    results = example('eval_unseen_sizes').main([*args, '--strategies', 'none', 'interpolate'])
    written = json.loads((out / 'results.json').read_text())
    assert json.loads(json.dumps(results)) == written  # what it returns is what it wrote
    results = written
    cells = {(row['strategy'], str(row['resolution'])): row['value'] for row in results['results']}
    sizes = ('16', '32', '[48, 32]')
    assert set(cells) == {(s, r) for s in ('none', 'interpolate') for r in sizes}
    assert results['complete'] and results['train_resolution'] == 32
    assert all(0.0 <= value <= 100.0 for value in cells.values())
    assert cells['none', '32'] == cells['interpolate', '32']  # at the training grid a strategy changes nothing
    assert (out / 'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    shown = capsys.readouterr().out
    assert 'trained at 32' in shown and '48x32:' in shown


def test_mixed_sizes_gives_each_image_its_own_output():
    result = example('mixed_sizes').main(['--depth', '2', '--steps', '2'])
    assert result['together'].shape == (3, 27)
    torch.testing.assert_close(result['together'], result['alone'], rtol=1e-4, atol=1e-5)
    grids = [(image.shape[1] // 8) * (image.shape[2] // 8) for image in result['images']]
    assert [tuple(t.shape) for t in result['tokens']] == [(1 + n, 192) for n in grids]
    assert len(result['losses']) == 2 and all(np.isfinite(result['losses']))


def test_an_example_runs_as_a_script():
    """The command line of examples/README.md, in a process of its own: argparse, the __main__ guard, the output."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / 'mixed_sizes.py'), '--depth', '1', '--steps', '1', '--mixed-sizes', 'pad'],
        cwd=ROOT,
        env={**os.environ, 'PYTHONPATH': ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'logits (3, 27)' in proc.stdout and 'step 1: loss' in proc.stdout
