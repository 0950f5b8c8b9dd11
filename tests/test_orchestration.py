"""The library runs without the workbench: shipped configs found by name, training and comparisons in process (two
trainings in one process keep their own logs), and the `vispe` command from a wheel installed outside the
checkout."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest
from conftest import WHEEL_SOURCES
from test_tools import tiny_config

from vispe.engine.config import load_config
from vispe.engine.config_files import configs_dir, resolve_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = 'vit/vit_tiny_shapes2d_position.py'
#: the environment of the installed vispe's processes: no checkout on the path
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}

#: --cfg-options for a two-iteration run of a shipped shapes2d config (test_tools.tiny_config's sizes; two epochs of
#: one batch, as the shipped schedule has a one-epoch warm-up)
TINY_OPTIONS = [
    'model.backbone.depth=2',
    'model.backbone.embed_dim=32',
    'model.backbone.num_heads=2',
    'train_dataloader.batch_size=8',
    'train_dataloader.dataset.num_samples=8',
    'val_dataloader.batch_size=16',
    'val_dataloader.dataset.num_samples=32',
    'test_dataloader.batch_size=16',
    'test_dataloader.dataset.num_samples=32',
    'train_cfg.max_epochs=2',
    'train_cfg.val_interval=2',
    'default_hooks.logger.interval=1',
]


def test_shipped_configs_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = os.path.join(configs_dir(), 'vit', 'vit_tiny_shapes2d_position.py')
    assert resolve_config(SHIPPED) == expected
    assert resolve_config('configs/' + SHIPPED) == expected  # as a checkout names it
    assert load_config(SHIPPED).model.backbone.encoding  # its _base_ files resolve next to it
    local = tmp_path / 'configs' / 'vit' / 'vit_tiny_shapes2d_position.py'
    local.parent.mkdir(parents=True)
    local.write_text('x = 1\n')
    assert resolve_config('configs/' + SHIPPED) == 'configs/' + SHIPPED  # a file here wins
    with pytest.raises(FileNotFoundError, match=r'did you mean vit/vit_tiny_shapes2d_position\.py'):
        load_config('vit/vit_tiny_shapes2d_positon.py')


def test_the_vispe_command_names_close_commands_for_a_typo(capsys):
    from vispe.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(['eval-resolutoin'])
    assert "error: unknown command 'eval-resolutoin'; did you mean eval-resolution" in str(exit_info.value)
    with pytest.raises(SystemExit) as exit_info:
        main(['--help'])
    assert exit_info.value.code == 0 and 'eval-cameras' in capsys.readouterr().out


def test_two_trainings_in_one_process_log_to_their_own_work_dirs(tmp_path, monkeypatch):
    """mmengine keys its logger, message hub and visualizer by the experiment name (config name + timestamp in
    seconds): two runs of one config in the same second would share the first one's log file without the release."""
    from mmengine.logging import MMLogger

    from vispe.engine.train import train

    config = tiny_config(tmp_path)
    monkeypatch.setattr(time, 'strftime', lambda fmt, t=None: '20260101_000000')  # the same second, always
    for name in ('a', 'b'):
        train(config, str(tmp_path / name))
    for name, other in (('a', 'b'), ('b', 'a')):
        log = (tmp_path / name / '20260101_000000' / '20260101_000000.log').read_text()
        assert 'Epoch(train)' in log and str(tmp_path / other) not in log
        assert (tmp_path / name / 'epoch_1.pth').is_file()
    assert 'tiny_20260101_000000' not in MMLogger._instance_dict


def test_compare_trains_and_evaluates_in_process_then_reuses(tmp_path):
    from vispe.experiments.compare import Run, compare

    runs = [Run('position', tiny_config(tmp_path), str(tmp_path / 'runs' / 'ape_learned'))]
    logged = []
    summary = compare(runs, ['32', '48'], str(tmp_path / 'out'), log=logged.append)
    assert any(line.startswith('$ vispe train') for line in logged)
    rows = summary['tasks']['position']['results']
    assert {(r['strategy'], r['resolution']) for r in rows} >= {('bicubic', 32), ('bicubic', 48)}
    assert all(0 <= r['value'] <= 100 for r in rows)
    assert (tmp_path / 'runs' / 'ape_learned' / 'eval' / 'results.png').is_file()
    assert json.loads((tmp_path / 'out' / 'summary.json').read_text())['tasks']['position']['train_resolution'] == 32
    logged.clear()
    assert compare(runs, ['32', '48'], str(tmp_path / 'out'), log=logged.append)['tasks'] == summary['tasks']
    assert sum('reusing' in line for line in logged) == 2  # the checkpoint and the evaluation


def _fresh_venv_with_the_wheel(tmp_path) -> str:
    """A wheel of this checkout installed into a new venv that sees the shared dependencies but not the checkout;
    returns the venv's bin folder."""
    src = tmp_path / 'src'  # a copy, so that the build leaves nothing in the checkout
    src.mkdir()
    for name in WHEEL_SOURCES:
        shutil.copy(os.path.join(ROOT, name), src / name)
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc')
    for name in ('vispe', 'configs'):
        shutil.copytree(os.path.join(ROOT, name), src / name, ignore=ignore)
    wheels = tmp_path / 'wheels'
    pip = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '-q']
    subprocess.run([*pip, 'wheel', '--no-deps', '--no-build-isolation', '-w', str(wheels), str(src)], check=True)
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    python = str(venv / 'bin' / 'python')
    site = subprocess.run(
        [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], capture_output=True, text=True
    ).stdout.strip()
    # installed before the dependencies are visible: pip would take the shared venv's vispe for this one
    (wheel,) = wheels.glob('vispe-*.whl')
    install = ['install', '--no-deps', '--no-index', '--ignore-installed', str(wheel)]
    subprocess.run([*pip, '--python', python, *install], env=CLEAN_ENV, check=True)
    # the dependencies, by path: a .pth line's folder is not scanned for .pth files, so the shared venv's editable
    # vispe (a .pth finder) stays out
    with open(os.path.join(site, 'shared_dependencies.pth'), 'w') as f:
        f.write(sysconfig.get_paths()['purelib'] + '\n')
    return str(venv / 'bin')


@pytest.mark.slow
def test_installed_wheel_trains_and_evaluates_a_shipped_config_outside_the_checkout(tmp_path):
    bin_dir = _fresh_venv_with_the_wheel(tmp_path)
    cwd = tmp_path / 'elsewhere'
    cwd.mkdir()

    def run(*args):
        proc = subprocess.run(args, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f'{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
        return proc.stdout

    listing = run(f'{bin_dir}/vispe', 'configs')  # '# in <the configs folder>', then the names
    configs = listing.splitlines()[0].removeprefix('# in ')
    assert configs == str(tmp_path / 'venv' / 'lib' / f'python{sys.version_info.major}.{sys.version_info.minor}'
                          / 'site-packages' / 'vispe' / 'configs')  # fmt: skip
    assert SHIPPED in listing.splitlines()
    options = ['--cfg-options', *TINY_OPTIONS]
    config = 'vit/vit_tiny_ape_learned_shapes2d_position.py'
    run(f'{bin_dir}/vispe', 'train', config, '--work-dir', 'work', *options)
    ckpt = cwd / 'work' / 'epoch_2.pth'
    assert ckpt.is_file() and (cwd / 'work' / 'last_checkpoint').read_text().strip() == str(ckpt)
    (dumped,) = (cwd / 'work').glob('*.py')
    assert 'embed_dim=32' in dumped.read_text()
    out = run(f'{bin_dir}/python', '-m', 'vispe', 'eval-resolution', config, str(ckpt), '--resolutions', '32', '48',
              '--out', 'eval', '--no-progress', *options)  # fmt: skip
    assert 'results.json' in out
    results = json.loads((cwd / 'eval' / 'results.json').read_text())
    assert results['complete'] and results['train_resolution'] == 32
    assert results['config'].startswith(configs)  # the package's copy of the config
    assert {(r['strategy'], r['resolution']) for r in results['results']} == {
        (s, r) for s in ('bicubic', 'bilinear', 'nearest') for r in (32, 48)
    }
    assert all(r['encoding'] == 'ape_learned' and 0 <= r['value'] <= 100 for r in results['results'])


def test_every_tool_is_a_vispe_command_and_its_script_a_shim(capsys):
    """Before: benchmark, compare_results, benchmark_fps and infer_points lived in tools/ only, so an installed vispe
    could not run them. Now every tool is a ``vispe`` subcommand and tools/X.py imports its main, or (the project's
    own tools: the GPU check, the leaderboards, timm's suite) a workbench module's, which vispe does not list."""
    import glob
    import re

    from vispe.cli import commands, main

    modules = {module for module, _ in commands().values() if module}
    assert not {'gpu-check', 'timm-tests', 'leaderboard', 'leaderboard-video'} & set(commands())  # the workbench's
    for script in glob.glob(os.path.join(ROOT, 'tools', '*.py')):
        name = os.path.basename(script)
        found = re.search(r'^from (vispe\.cli|workbench)\.(\w+) import (?:\w+, )*main\b', open(script).read(), re.M)
        assert found, f'{name} is not a shim of a vispe command or a workbench module'
        if found.group(1) == 'workbench':
            assert os.path.isfile(os.path.join(ROOT, 'workbench', f'{found.group(2)}.py'))
            assert found.group(2) not in modules, f'{name}: a workbench module listed as a vispe command'
        else:
            assert found.group(2) in modules, f'{name} is not a shim of a vispe command'
    for command in ('benchmark', 'compare-results', 'benchmark-fps', 'infer-points'):
        with pytest.raises(SystemExit) as exit_info:
            main([command, '--help'])
        assert exit_info.value.code == 0 and f'usage: vispe {command}' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # a command's exit status comes through
        main(['benchmark', '--model', 'vit_tiny_patch16_22'])
    assert exit_info.value.code == 2 and 'no such timm or vispe model' in capsys.readouterr().err


def test_the_resume_hint_names_the_command_the_user_ran(monkeypatch, tmp_path):
    """Before: the Ctrl-C line said 'python tools/train.py ... --resume' even to a user of the installed command."""
    from types import SimpleNamespace

    import torch

    from vispe.cli.train import invoked_as
    from vispe.engine.runner import interrupted_message

    assert invoked_as('vispe train') == 'vispe train'
    monkeypatch.setattr(sys, 'argv', ['tools/train.py', 'c.py'])
    assert invoked_as(None) == 'python tools/train.py'
    torch.save({'meta': {'epoch': 1}, 'state_dict': {}}, tmp_path / 'epoch_1.pth')
    cfg, args = SimpleNamespace(work_dir=str(tmp_path)), SimpleNamespace(cfg_options=None)
    said = interrupted_message('c.py', cfg, args, 'vispe train')
    assert said.endswith(f'continue with: vispe train c.py --work-dir {tmp_path} --resume')


def test_timm_tests_passes_what_follows_double_dash_to_pytest(monkeypatch, capsys):
    """Before: 'SRC --sizes tiny -- -x' was refused, and '--sizes tiny SRC -- -x' took '-x' for the timm source."""
    from workbench import timm_tests

    calls = []
    monkeypatch.setattr(timm_tests, 'read_test_file', lambda source: 'FEAT_INTER_FILTERS = [\n]\n')
    monkeypatch.setattr(timm_tests.subprocess, 'call', lambda cmd, cwd: calls.append(cmd) or 0)
    assert timm_tests.main(['SRC', '--sizes', 'tiny', '--encodings', 'liere', '--', '-x', '--maxfail=2']) == 0
    cmd = calls[0]
    assert cmd[-2:] == ['-x', '--maxfail=2'] and cmd[cmd.index('-k') + 1] == '(vit_tiny_patch16_liere_224)'
    with pytest.raises(SystemExit) as exit_info:  # the source swallowed by --sizes: refused, never run
        timm_tests.main(['--sizes', 'tiny', 'SRC', '--', '-x'])
    assert exit_info.value.code == 2 and 'timm_source' in capsys.readouterr().err and len(calls) == 1
    with pytest.raises(SystemExit):
        timm_tests.main(['SRC', '--', '-k', 'forward'])
    assert '-k would replace' in capsys.readouterr().err and len(calls) == 1
