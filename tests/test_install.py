"""``pip install vispe`` beside an installed torch: the wheel states supported ranges, not requirements.txt's exact
pins, and pip's resolver, installing it into a fresh venv that already holds the project's packages, installs vispe
alone (torch's version and files unchanged); open3d is asked for only by the ``3d`` extra."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import ROOT, WHEEL_SOURCES
from packaging.requirements import Requirement
from packaging.version import Version

#: the installs' environment: no checkout on the path, no venv of the caller's
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
#: the packages whose range must have a floor (the ones vispe's code ties to an API's first release)
FLOORED = {'torch', 'torchvision', 'timm', 'mmengine', 'kornia', 'torchmetrics', 'numpy'}
#: what make test-floor last passed with (tests_floor/floor.py writes it)
FLOOR_RECORD = Path(ROOT, 'install-floor.json')
THREE_D_EXTRAS = ('3d', 'points', 'cameras')


def pins() -> dict[str, str]:
    """requirements.txt's exact pins: name -> version."""
    out = {}
    for line in Path(ROOT, 'requirements.txt').read_text().splitlines():
        line = line.split('#')[0].strip()
        if line:
            name, version = line.split('==')
            out[name.lower()] = version
    return out


@pytest.fixture(scope='module')
def wheel(tmp_path_factory) -> Path:
    """vispe's wheel, built (no dependencies, no build isolation: offline) from a copy of the checkout, so that the
    build leaves nothing in it."""
    tmp = tmp_path_factory.mktemp('wheel')
    src = tmp / 'vispe-src'
    src.mkdir()
    for name in WHEEL_SOURCES:
        shutil.copy(os.path.join(ROOT, name), src / name)
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc')
    for name in ('vispe', 'configs'):
        shutil.copytree(os.path.join(ROOT, name), src / name, ignore=ignore)
    out = tmp / 'wheels'
    # absolute paths: pip takes a bare folder name for a package name on the index
    build = [sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '--no-build-isolation', '-w', str(out), str(src)]
    proc = subprocess.run(build, env=CLEAN_ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = out.glob('vispe-*.whl')
    return built


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith('.dist-info/METADATA')]
        meta = Parser().parsestr(zf.read(name).decode())
    return [Requirement(r) for r in meta.get_all('Requires-Dist')]


def test_the_wheel_states_ranges_that_hold_the_pins(wheel):
    reqs = requires(wheel)
    core = {r.name.lower(): r for r in reqs if r.marker is None}
    pinned = pins()
    for req in reqs:
        assert all(spec.operator not in ('==', '===') for spec in req.specifier), f'{req} is an exact pin'
        pin = pinned.get(req.name.lower())  # numpy comes with torch: not pinned
        assert pin is None or pin in req.specifier, f"requirements.txt's {req.name}=={pin} is outside {req}"
    for name in FLOORED:
        assert any(spec.operator == '>=' for spec in core[name].specifier), f'{core[name]} has no floor'
    # the 2D toolkit does not ask for open3d; each 3D extra does
    assert 'open3d' not in core
    for extra in THREE_D_EXTRAS:
        wanted = {r.name for r in reqs if r.marker is not None and r.marker.evaluate({'extra': extra})}
        assert wanted == {'open3d'}, extra


def setup_floors() -> dict[str, str]:
    """setup.py's INSTALL_REQUIRES as {name: floor} for each requirement with a ``>=`` (read, not run)."""
    tree = ast.parse(Path(ROOT, 'setup.py').read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'INSTALL_REQUIRES' for t in node.targets)
    ]
    reqs = [Requirement(r) for r in ast.literal_eval(value)]
    return {r.name.lower(): s.version for r in reqs for s in r.specifier if s.operator == '>='}


def test_every_floor_in_setup_py_is_the_version_make_test_floor_passed_with():
    """No floor is claimed without a run behind it: install-floor.json holds what make test-floor's smoke suite
    passed with, and each floor of setup.py must be that version (2.9 and 2.9.0 are one version)."""
    floors = setup_floors()
    assert FLOORED <= set(floors), f'setup.py states no floor for {sorted(FLOORED - set(floors))}'
    rerun = 'run `make test-floor` (it rewrites install-floor.json) and commit the record'
    assert FLOOR_RECORD.is_file(), f'{FLOOR_RECORD.name} is missing: {rerun}'
    passed = json.loads(FLOOR_RECORD.read_text())['passed']
    stale = [
        f'{name}>={floor} (the record: {passed.get(name, "none")})'
        for name, floor in sorted(floors.items())
        if name not in passed or Version(Version(passed[name]).public) != Version(floor)
    ]
    stale += [f'{name} {passed[name]} (setup.py: no floor)' for name in sorted(set(passed) - set(floors))]
    assert not stale, f"setup.py's floors differ from install-floor.json: {'; '.join(stale)}: {rerun}"


def shared_venv(tmp_path: Path) -> Path:
    """A new venv whose interpreter sees this venv's packages (torch, timm, ...) through a .pth line, and pip's
    resolver sees them as installed, outside the new environment (so never uninstalled). A .pth line's folder is not
    scanned for .pth files, so this venv's editable vispe stays invisible to imports."""
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True, timeout=120)
    python = venv / 'bin' / 'python'
    site = subprocess.run(
        [str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, 'shared.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
    return venv


PROBE = """
import json, torch, vispe
print(json.dumps({'torch': torch.__version__, 'torch_file': torch.__file__, 'vispe': vispe.__file__}))
"""


def test_pip_install_keeps_the_installed_torch(wheel, tmp_path):
    import torch

    venv = shared_venv(tmp_path)
    python = str(venv / 'bin' / 'python')
    site = Path(venv / 'lib' / f'python{sys.version_info.major}.{sys.version_info.minor}' / 'site-packages')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()

    def pip_install(target: str) -> None:
        # with the resolver (no --no-deps); offline: every dependency must already be installed
        cmd = [python, '-m', 'pip', 'install', '--no-index', '--find-links', str(wheel.parent), target]
        proc = subprocess.run(cmd, cwd=elsewhere, env=CLEAN_ENV, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f'{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'

    def installed() -> set[str]:
        """What pip put into the new venv (distribution folders)."""
        return {p.name.split('-')[0] for p in site.glob('*.dist-info')}

    pip_install(str(wheel))
    assert installed() == {'vispe'}  # nothing else: torch and the rest were taken as installed
    proc = subprocess.run([python, '-c', PROBE], cwd=elsewhere, env=CLEAN_ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert (seen['torch'], seen['torch_file']) == (torch.__version__, torch.__file__)
    assert seen['vispe'] == str(site / 'vispe' / '__init__.py')  # the wheel's vispe, not the checkout's
    # the 3D extra resolves against the installed open3d, and still changes nothing else
    if importlib.util.find_spec('open3d') is not None:
        pip_install(f'vispe[3d] @ {wheel.as_uri()}')
        assert installed() == {'vispe'}
