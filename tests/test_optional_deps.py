"""open3d is optional (``pip install vispe`` leaves it out, ``vispe[3d]`` adds it): vispe, its 2D models, training,
sweeps and benchmarks, the GPU tests' collection and tools/gpu_check.sh's Python run where it is missing (the GPU
machine's own Python), and what needs it says so in one line naming the extra."""

from __future__ import annotations

import json
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

#: then the ``vispe`` command once for each argument list in the JSON list after ``-c``'s script, in this one
#: interpreter (each command's start-up is a few seconds of imports), each announced on stdout
VISPE = (
    NO_OPEN3D
    + """
import json
from vispe.cli import main

for args in json.loads(sys.argv[1]):
    print('$ vispe', *args, flush=True)
    try:
        main(args)
    except SystemExit as done:  # a command may end with sys.exit(0); any other status ends the script with it
        if done.code not in (None, 0):
            raise
assert 'open3d' not in sys.modules, 'open3d was imported'
"""
)


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
    throughput benchmark, each through the ``vispe`` command, one after the other in an interpreter where open3d
    does not import."""
    config = tiny_config(tmp_path, encoding='rope_mixed')
    ckpt, out, report = tmp_path / 'work' / 'epoch_1.pth', tmp_path / 'eval', tmp_path / 'throughput.json'
    commands = [
        ['train', config, '--work-dir', str(tmp_path / 'work')],
        ['eval-resolution', config, str(ckpt), '--resolutions', '32', '--strategy', 'none', '--out', str(out)],
        ['benchmark', '--throughput', config, '--iters', '1', '--warmup', '1', '--rounds', '1', '--out', str(report)],
    ]
    proc = without_open3d(VISPE, json.dumps(commands), cwd=tmp_path)
    ran = [line for line in proc.stdout.splitlines() if line.startswith('$ vispe')]
    assert proc.returncode == 0, f'{ran[-1:]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}'
    assert len(ran) == 3 and ckpt.is_file() and (out / 'results.json').is_file() and report.is_file()
    assert 'ratio plain / runner' in proc.stdout.split(ran[-1], 1)[1]  # printed by the benchmark


@pytest.mark.slow
def test_gpu_tests_collect_without_open3d() -> None:
    """``pytest --collect-only -m gpu`` over tests/ (what tools/gpu_check.sh runs) collects without an error where
    open3d is missing: the modules that need it skip, the others import without it; test_amp, which takes the
    point and camera tools' tiny configs, keeps its tests."""
    # both collections in one interpreter (its start-up is a few seconds of imports), separated by a line
    script = NO_OPEN3D + (
        'import pytest\n'
        "collect = ['--collect-only', '-q', '-p', 'no:cacheprovider']\n"
        "code = pytest.main([*collect, '-m', 'gpu', 'tests'])\n"
        "print('---- test_amp', flush=True)\n"
        "sys.exit(code or pytest.main([*collect, 'tests/test_amp.py']))\n"
    )
    proc = without_open3d(script)
    gpu, _, amp = proc.stdout.partition('---- test_amp')
    assert proc.returncode == 0 and amp, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert 'error' not in gpu.lower(), gpu[-3000:]
    assert 'tests/test_gpu.py::' in gpu
    assert 'tests/test_amp.py::' in amp and 'error' not in amp.lower(), amp[-3000:] + proc.stderr[-2000:]


def test_what_needs_open3d_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from vispe.bench import fps
    from vispe.datasets import MultiViewScenes, Primitives3D
    from vispe.datasets.pointfiles import read_points
    from vispe.optional import MissingExtra

    monkeypatch.setitem(sys.modules, 'open3d', None)  # import open3d now raises ModuleNotFoundError
    for build in (Primitives3D, MultiViewScenes):
        hint = r"pip install open3d \(in a vispe checkout: pip install '\.\[3d\]'\)"
        with pytest.raises(MissingExtra, match=rf'^{build.__name__} needs open3d.*: {hint}') as err:
            build()
        assert '\n' not in str(err.value)
    path = tmp_path / 'cloud.xyz'
    path.write_text('0 0 0\n1 1 1\n')
    with pytest.raises(MissingExtra, match='cloud.xyz needs open3d'):
        read_points(str(path))
    with pytest.raises(MissingExtra, match=r'farthest-point-sampling benchmark needs open3d.*: pip install open3d'):
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
        and "needs open3d, which is not installed here: pip install open3d (in a vispe checkout: pip install '.[3d]')"
        in proc.stderr
    ), proc.stderr[-3000:]
