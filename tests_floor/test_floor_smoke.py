"""The smoke suite of ``make test-floor``: vispe installed (``pip install .``, not editable) into a venv of the floor
versions that setup.py states, exercised from outside the checkout. Each test is one path a user takes first:
import, a rotary ViT's forward and backward, an epoch of training through mmengine's Runner, and one cell of the
resolution sweep through the ``vispe`` command; and FX and ``torch.export`` of a rotary ViT, which set torch's floor."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

#: the checkout that was installed (set by make test-floor); the vispe under test must not be imported from there
CHECKOUT = os.environ.get('VISPE_CHECKOUT', '')
TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_vispe_imports_from_the_installed_wheel():
    import vispe

    where = Path(vispe.__file__).resolve()
    assert where == Path(sysconfig.get_paths()['purelib'], 'vispe', '__init__.py').resolve(), where
    assert not CHECKOUT or where != Path(CHECKOUT, 'vispe', '__init__.py').resolve(), f'{where} is the checkout'
    assert {'rope_mixed', 'rope_axial', 'ape_learned'} <= set(vispe.list_encodings())


def test_a_rotary_vit_runs_forward_and_backward_at_two_sizes():
    import vispe

    model = vispe.create_model('vit_small_patch16_224', encoding='rope_mixed', **TINY)
    for size in ((32, 32), (40, 56)):  # the training grid and an unseen, non-square one
        x = torch.randn(2, 3, *size)
        logits = model(x)
        assert logits.shape == (2, 5) and torch.isfinite(logits).all()
        model.zero_grad()
        logits.logsumexp(-1).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
        rotary = [n for n, g in grads.items() if 'freq' in n and g.abs().sum() > 0]
        assert rotary, 'no gradient reached the learned rotary frequencies'
    # the rotary encoding depends on where a patch is: shuffling the patches of an image changes the output
    x = torch.randn(1, 3, 32, 32)
    patches = x.unfold(2, 8, 8).unfold(3, 8, 8)  # (1, 3, 4, 4, 8, 8)
    shuffled = patches.flip(2).permute(0, 1, 2, 4, 3, 5).reshape(1, 3, 32, 32)
    with torch.no_grad():
        assert not torch.allclose(model(x), model(shuffled), atol=1e-5)


def test_fx_and_export_of_a_rotary_vit_hold_at_other_sizes():
    """The floor of torch is where these hold: symbolic_trace, and torch.export with dynamic H and W."""
    import vispe

    model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', depth=2).eval()
    with torch.no_grad():
        graph = torch.fx.symbolic_trace(model)
        for size in ((32, 48), (64, 64)):
            x = torch.randn(1, 3, *size)
            assert torch.equal(graph(x), model(x)), size
    h, w = torch.export.Dim('h', min=1, max=32), torch.export.Dim('w', min=1, max=32)
    example = (torch.randn(1, 3, 32, 48),)
    exported = torch.export.export(model, example, dynamic_shapes={'x': {2: 16 * h, 3: 16 * w}}).module()
    with torch.no_grad():
        for size in ((64, 96), (48, 48)):
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(exported(x), model(x), rtol=1e-5, atol=1e-5)


def tiny_config(tmp_path: Path) -> str:
    """The shipped rope_mixed shapes2d config shrunk: 2 blocks of width 32, 16 images, batch 8, one epoch."""
    from vispe.engine.config_files import configs_dir

    base = Path(configs_dir(), 'vit', 'vit_tiny_rope_mixed_shapes2d_position.py')
    assert base.is_file(), f'the wheel ships no {base}'
    path = tmp_path / 'tiny_rope_mixed.py'
    path.write_text(f"""
_base_ = ['{base}']
model = dict(backbone=dict(depth=2, embed_dim=32, num_heads=2))
train_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False, dataset=dict(num_samples=16))
val_dataloader = dict(batch_size=16, num_workers=0, persistent_workers=False, dataset=dict(num_samples=32))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)]
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=1))
""")
    return str(path)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """One epoch (2 iterations) through mmengine's Runner: (config, checkpoint, initial state, runner)."""
    from mmengine.runner import Runner

    from vispe.engine.config import load_config

    tmp = tmp_path_factory.mktemp('train')
    config = tiny_config(tmp)
    runner = Runner.from_cfg(load_config(config, work_dir=str(tmp / 'work')))
    init = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    return config, tmp / 'work' / 'epoch_1.pth', init, runner


def test_one_epoch_through_the_runner_trains_and_checkpoints(trained):
    _, checkpoint, init, runner = trained
    assert runner.iter == 2 and runner.epoch == 1
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert math.isfinite(loss) and loss > 0
    state = torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict']
    changed = [k for k in init if not torch.equal(init[k], state[k].to(init[k].dtype))]
    assert any('blocks.0.attn' in k for k in changed) and any('head' in k for k in changed), changed


def test_one_sweep_cell_at_an_unseen_resolution(trained, tmp_path):
    config, checkpoint, _, _ = trained
    vispe_cmd = Path(sys.executable).with_name('vispe')  # the installed console script
    out = tmp_path / 'sweep'
    cmd = [str(vispe_cmd), 'eval-resolution', config, str(checkpoint), '--out', str(out), '--resolutions', '48']
    cmd += ['--strategy', 'interpolate', '--device', 'cpu', '--no-progress']
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f'{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
    doc = json.loads((out / 'results.json').read_text())
    assert doc['complete'] and not doc['failed'] and doc['metric'] == 'accuracy', doc
    (row,) = doc['results']
    assert (row['encoding'], row['strategy'], row['resolution']) == ('rope_mixed', 'interpolate', 48), row
    correct = row['value'] * 32 / 100  # accuracy (%) over the 32 validation images
    assert 0 <= correct <= 32 and abs(correct - round(correct)) < 1e-6, row
    assert (out / 'results.png').stat().st_size > 0
