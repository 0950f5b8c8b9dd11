"""open3d is optional (``pip install vispe`` leaves it out, ``vispe[3d]`` adds it): vispe, its 2D models, training,
sweeps and benchmarks, the GPU tests' collection and tools/gpu_check.sh's Python run where it is missing (the GPU
machine's own Python), and what needs it says so in one line naming the extra."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from test_tools import tiny_config

#: put first in a fresh interpreter: open3d cannot be imported (a meta-path finder refuses it, as a missing install
#: would)
NO_OPEN3D = """
import sys

class NoOpen3d:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'open3d':
            raise ModuleNotFoundError(f"No module named '{name}'")

sys.meta_path.insert(0, NoOpen3d())
"""

#: import what the 2D side and the GPU check use and train a 2D ViT one step
WITHOUT_OPEN3D = (
    NO_OPEN3D
    + """
import torch
import vispe
import vispe.datasets
import vispe.bench.mixed
import workbench.gpu_summary
import vispe.bench.throughput
import vispe.cli.eval_generation, vispe.tasks.diffusion  # the DiT's training and its evaluation

model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', img_size=32, depth=1)
model(torch.randn(2, 3, 32, 32)).square().mean().backward()
assert 'open3d' not in sys.modules, 'open3d was imported'
print('ok')
"""
)

#: then the ``vispe`` command with the arguments after ``-c``'s script
VISPE = NO_OPEN3D + 'from vispe.cli import main\nmain()\nassert "open3d" not in sys.modules, "open3d was imported"\n'


def without_open3d(script: str, *args: str, cwd=ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``script`` (which starts with ``NO_OPEN3D``) with ``args`` in a fresh interpreter that imports this
    checkout's vispe from any ``cwd``."""
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, *filter(None, [os.environ.get('PYTHONPATH')])])}
    cmd = [sys.executable, '-c', script, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_vispe_and_2d_models_run_without_open3d() -> None:
    proc = without_open3d(WITHOUT_OPEN3D)
    assert proc.returncode == 0 and proc.stdout.strip() == 'ok', proc.stderr[-3000:]


@pytest.mark.slow
def test_2d_training_evaluation_and_throughput_run_without_open3d(tmp_path) -> None:
    """A tiny shapes2d ViT trained by the Runner (two iterations), its resolution sweep and the Runner-vs-loop
    throughput benchmark, each through the ``vispe`` command, in interpreters where open3d does not import."""

    def vispe(*args: str) -> str:
        proc = without_open3d(VISPE, *args, cwd=tmp_path)
        assert proc.returncode == 0, f'vispe {" ".join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}'
        return proc.stdout

    config = tiny_config(tmp_path, encoding='rope_mixed')
    vispe('train', config, '--work-dir', str(tmp_path / 'work'))
    ckpt = tmp_path / 'work' / 'epoch_1.pth'
    assert ckpt.is_file()
    out = tmp_path / 'eval'
    vispe('eval-resolution', config, str(ckpt), '--resolutions', '32', '--strategy', 'none', '--out', str(out))
    assert (out / 'results.json').is_file()
    report = tmp_path / 'throughput.json'
    printed = vispe('benchmark', '--throughput', config, '--iters', '1', '--warmup', '1', '--rounds', '1',
                    '--out', str(report))  # fmt: skip
    assert 'ratio plain / runner' in printed and report.is_file()


@pytest.mark.slow
def test_gpu_tests_collect_without_open3d() -> None:
    """``pytest --collect-only -m gpu`` over tests/ (what tools/gpu_check.sh runs) collects without an error where
    open3d is missing: the modules that need it skip, the others import without it; test_amp, which takes the
    point and camera tools' tiny configs, keeps its tests."""
    script = NO_OPEN3D + 'import pytest\nsys.exit(pytest.main(sys.argv[1:]))\n'
    collect = ['--collect-only', '-q', '-p', 'no:cacheprovider']
    proc = without_open3d(script, *collect, '-m', 'gpu', 'tests')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert 'error' not in proc.stdout.lower(), proc.stdout[-3000:]
    assert 'tests/test_gpu.py::' in proc.stdout
    proc = without_open3d(script, *collect, 'tests/test_amp.py')
    assert proc.returncode == 0 and 'tests/test_amp.py::' in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_what_needs_open3d_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from vispe.bench import fps
    from vispe.datasets import MultiViewScenes, Primitives3D
    from vispe.datasets.pointfiles import read_points
    from vispe.optional import MissingExtra

    monkeypatch.setitem(sys.modules, 'open3d', None)  # import open3d now raises ModuleNotFoundError
    for build in (Primitives3D, MultiViewScenes):
        with pytest.raises(MissingExtra, match=rf"^{build.__name__} needs open3d.*pip install 'vispe\[3d\]'") as err:
            build()
        assert '\n' not in str(err.value)
    path = tmp_path / 'cloud.xyz'
    path.write_text('0 0 0\n1 1 1\n')
    with pytest.raises(MissingExtra, match='cloud.xyz needs open3d'):
        read_points(str(path))
    with pytest.raises(MissingExtra, match=r"farthest-point-sampling benchmark needs open3d.*'vispe\[3d\]'"):
        fps.run([(1, 64, 8)])


@pytest.mark.parametrize(
    'args',
    [
        ['train', os.path.join(ROOT, 'configs/point/point_tiny_rope3d_primitives3d.py')],
        ['benchmark-fps', '--settings', '1x64x8'],
    ],
    ids=['train-point-config', 'benchmark-fps'],
)
def test_the_vispe_command_prints_one_line_naming_the_extra(args, tmp_path) -> None:
    script = NO_OPEN3D + 'from vispe.cli import main\nmain()\n'
    extra = ['--work-dir', str(tmp_path / 'work')] if args[0] == 'train' else ['--out', str(tmp_path / 'fps.json')]
    proc = without_open3d(script, *args, *extra, cwd=tmp_path)
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().count('\n') == 0
        and "needs open3d, which is not installed here: pip install 'vispe[3d]'" in proc.stderr
    ), proc.stderr[-3000:]
