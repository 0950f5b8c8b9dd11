"""What makes vispe a package: one version everywhere it is stated, a console script that answers ``-h`` and
``--version`` without importing torch and lists the commands vispe.cli runs, and a wheel that carries the license,
py.typed and that script's module."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import WHEEL_SOURCES

import vispe
import vispe_launcher
from vispe import cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {'PYTHONPATH': str(ROOT), 'PATH': '/usr/bin:/bin'}


def console_script() -> tuple[str, str]:
    """(module, function) of the ``vispe`` console script, as setup.py declares it."""
    found = re.search(r"'vispe = ([\w.]+):(\w+)'", (ROOT / 'setup.py').read_text())
    assert found, "setup.py declares no console script 'vispe = module:function'"
    return found.group(1), found.group(2)


def run_entry(*args: str) -> dict:
    """The console script's function run with ``args`` in a fresh interpreter: its exit status, output and whether
    torch or vispe were imported by the end."""
    module, function = console_script()
    script = f"""
import contextlib, io, json, sys
from {module} import {function} as entry
out, code = io.StringIO(), 0
with contextlib.redirect_stdout(out):
    try:
        entry({list(args)!r})
    except SystemExit as exit:
        code = exit.code
print(json.dumps({{'code': code, 'out': out.getvalue(), 'loaded': sorted(m for m in ('torch', 'timm', 'vispe')
                                                                         if m in sys.modules)}}))
"""
    proc = subprocess.run([sys.executable, '-c', script], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_help_version_and_a_typo_import_neither_torch_nor_vispe():
    """Before: the console script was vispe.cli:main, so `vispe -h` imported vispe/__init__.py (torch, timm, the timm
    names) before it parsed its arguments: 7-20 s to print the help."""
    shown = run_entry('-h')
    assert (shown['code'], shown['loaded']) == (0, [])
    assert shown['out'].strip() == cli.usage()
    shown = run_entry('--version')
    assert (shown['code'], shown['out'], shown['loaded']) == (0, f'vispe {vispe.__version__}\n', [])
    shown = run_entry('trian')
    assert shown['loaded'] == [] and shown['code'].endswith("unknown command 'trian'; did you mean train?")


def test_the_launcher_lists_the_commands_vispe_cli_runs():
    """The launcher's table is vispe.cli.commands() written out, shipped sweeps included; a new command or sweep
    (or new words for one) goes into vispe_launcher.COMMANDS too."""
    listed = tuple((name, about) for name, (_, about) in cli.commands().items())
    table = ',\n'.join(f'    {entry!r}' for entry in listed)
    assert vispe_launcher.COMMANDS == listed, f'vispe_launcher.COMMANDS should read:\n{table}'
    assert vispe_launcher.usage() == cli.usage()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(['demo-poinst'])
    assert exit_info.value.code == vispe_launcher.unknown_command('demo-poinst')


def test_a_command_goes_through_the_launcher_to_vispe_cli(capsys):
    with pytest.raises(SystemExit) as exit_info:
        vispe_launcher.main(['compare-results', '--help'])
    assert exit_info.value.code == 0 and 'usage: vispe compare-results' in capsys.readouterr().out
    cli.main(['--version'])  # python -m vispe --version
    assert capsys.readouterr().out == f'vispe {vispe.__version__}\n'


def test_one_version_everywhere():
    """vispe/__init__.py holds the version; setup.py, the launcher, CITATION.cff and the changelog's newest release
    (or its Unreleased section, while one is open) agree with it."""
    proc = subprocess.run(
        [sys.executable, 'setup.py', '--version'], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == vispe.__version__ == vispe_launcher.version()
    citation = yaml.safe_load((ROOT / 'CITATION.cff').read_text())
    assert citation['version'] == vispe.__version__
    releases = re.findall(r'^## \[([^\]]+)\]', (ROOT / 'CHANGELOG.md').read_text(), re.M)
    assert releases[0] == 'Unreleased' and vispe.__version__ in releases[:2], releases


def test_citation_has_what_cff_requires():
    """CFF 1.2.0's required keys (cff-version, message, title, authors), each author named, and the license."""
    citation = yaml.safe_load((ROOT / 'CITATION.cff').read_text())
    assert citation['cff-version'] == '1.2.0'
    assert {'message', 'title', 'authors'} <= set(citation) and all(
        isinstance(citation[k], str) for k in ('message', 'title')
    )
    assert citation['authors'] and all(a.get('name') or a.get('family-names') for a in citation['authors'])
    assert citation['license'] == 'Apache-2.0'
    assert 'Apache License' in (ROOT / 'LICENSE').read_text().splitlines()[1]


def test_the_wheel_carries_license_types_and_launcher(tmp_path):
    """Built as tests/test_install.py builds it (no build isolation: offline): the launcher module beside the
    package and named by the console script, py.typed, the license file and its expression, the version."""
    src = tmp_path / 'src'
    src.mkdir()
    for name in WHEEL_SOURCES:
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc')
    for name in ('vispe', 'configs'):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    build = [sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '--no-build-isolation', '-w', str(tmp_path)]
    proc = subprocess.run([*build, str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob('vispe-*.whl')
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f'vispe-{vispe.__version__}.dist-info'
        metadata = zf.read(f'{info}/METADATA').decode()
        entry_points = zf.read(f'{info}/entry_points.txt').decode()
    assert {'vispe/py.typed', 'vispe_launcher.py', f'{info}/licenses/LICENSE'} <= names
    assert 'License-Expression: Apache-2.0' in metadata.splitlines()
    assert f'Version: {vispe.__version__}' in metadata.splitlines()
    module, function = console_script()
    assert f'vispe = {module}:{function}' in entry_points.splitlines()


def test_no_install_hint_names_a_package_no_index_has():
    """vispe is not on a package index: `pip install 'vispe[3d]'` fails; the hints name open3d or the checkout."""
    from vispe.optional import THREE_D_INSTALL

    assert 'pip install open3d' in THREE_D_INSTALL and "pip install '.[3d]'" in THREE_D_INSTALL
    stale = re.compile(r"pip install '?vispe\b")
    files = [ROOT / 'README.md', ROOT / 'setup.py', *ROOT.glob('docs/**/*.md'), *ROOT.glob('vispe/**/*.py')]
    files += [*ROOT.glob('examples/*'), ROOT / 'data' / 'README.md']
    found = [
        f'{p.relative_to(ROOT)}: {m.group(0)}' for p in files if p.is_file() for m in stale.finditer(p.read_text())
    ]
    assert not found, found
