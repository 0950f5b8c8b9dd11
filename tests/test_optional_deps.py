"""open3d is optional: vispe, its 2D models and benchmarks and tools/gpu_check.sh's Python run where it is missing
(the GPU machine's own Python), and what needs it says so in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

#: run in a fresh interpreter where open3d cannot be imported (a meta-path finder refuses it, as a missing install
#: would), then import what the 2D side and the GPU check use and train a 2D ViT one step
WITHOUT_OPEN3D = """
import sys

class NoOpen3d:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'open3d':
            raise ModuleNotFoundError(f"No module named '{name}'")

sys.meta_path.insert(0, NoOpen3d())
import torch
import vispe
import vispe.datasets
import vispe.bench.mixed
import vispe.bench.gpu_summary
import vispe.bench.throughput

model = vispe.create_model('vit_tiny_patch16_224', encoding='rope_mixed', img_size=32, depth=1)
model(torch.randn(2, 3, 32, 32)).square().mean().backward()
assert 'open3d' not in sys.modules, 'open3d was imported'
print('ok')
"""


def test_vispe_and_2d_models_run_without_open3d() -> None:
    proc = subprocess.run([sys.executable, '-c', WITHOUT_OPEN3D], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == 'ok', proc.stderr[-3000:]


def test_what_needs_open3d_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from vispe.datasets import MultiViewScenes, Primitives3D
    from vispe.datasets.pointfiles import read_points

    monkeypatch.setitem(sys.modules, 'open3d', None)  # import open3d now raises ModuleNotFoundError
    for build in (Primitives3D, MultiViewScenes):
        with pytest.raises(ImportError, match=rf'^{build.__name__} needs open3d.*pip install open3d') as err:
            build()
        assert '\n' not in str(err.value)
    path = tmp_path / 'cloud.xyz'
    path.write_text('0 0 0\n1 1 1\n')
    with pytest.raises(ImportError, match='cloud.xyz needs open3d'):
        read_points(str(path))
