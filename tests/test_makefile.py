"""The Makefile's bootstrap refuses early, with the fix, when the disk cannot hold a new .venv."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which('make') is None, reason='make is not installed')


def bootstrap(venv: Path, min_free_gb: int, python: str = 'python3.11') -> subprocess.CompletedProcess:
    """Build only the venv stamp, into a venv path of the test's own, so the project's .venv is untouched."""
    return subprocess.run(
        ['make', f'{venv}/.installed', f'VENV={venv}', f'VENV_MIN_FREE_GB={min_free_gb}', f'PYTHON={python}'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_new_venv_on_a_full_disk_stops_before_installing(tmp_path):
    venv = tmp_path / 'venv'
    run = bootstrap(venv, min_free_gb=10**7)
    assert run.returncode != 0
    assert 'needs about 10000000 GB free' in run.stdout
    assert 'free some space' in run.stdout
    assert not venv.exists(), 'the guard must stop before a half-built venv is left behind'


def test_guard_lets_the_bootstrap_through_when_there_is_room(tmp_path):
    # PYTHON=false exists as a command but cannot make a venv: the run fails one step after the guard.
    run = bootstrap(tmp_path / 'venv', min_free_gb=0, python='false')
    assert run.returncode != 0
    assert 'GB free' not in run.stdout + run.stderr
    assert f'false -m venv {tmp_path / "venv"}' in run.stdout, 'the next step, making the venv, was not reached'
