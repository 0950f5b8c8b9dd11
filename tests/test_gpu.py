"""Checks that need a CUDA device (skipped without one; tools/gpu_check.sh runs them with ``pytest -m gpu``):
the fused SDPA kernel each kind of encoding keeps, bf16 training through mmengine's AmpOptimWrapper, compiled
models matching eager ones, and grid tables cached per device."""

from __future__ import annotations

import pytest
import torch
from test_amp import CONFIGS, first_output
from test_compile import model_and_inputs

import vispe
from vispe.bench.subjects import encoding_kind
from vispe.bench.timing import sdpa_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device (tools/gpu_check.sh runs these)'),
]
#: kernels that keep the attention fused on CUDA; 'math' materialises the weights
FUSED = {'flash', 'efficient', 'cudnn'}


def cuda_step(name: str):
    model, inputs = model_and_inputs(name)
    model = model.cuda().train()
    inputs = tuple(x.cuda() for x in inputs)

    def step() -> None:
        with torch.autocast('cuda', dtype=torch.bfloat16):
            out = first_output(model(*inputs))
        out.float().square().mean().backward()

    return model, inputs, step


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_encodings_keep_a_fused_kernel_on_cuda(name: str) -> None:
    """Rotary, embed and value encodings: a fused kernel (flash, efficient or cudnn); bias encodings: one that takes
    a bias (efficient or cudnn), never the math fallback."""
    _, _, step = cuda_step(name)
    step()  # warm-up: first-call dispatch is what later calls get too, but let caches fill
    kernels = set(sdpa_backend(step).split('+'))
    assert kernels <= FUSED, f'{name} ({encoding_kind(name)}) ran {kernels}'
    if encoding_kind(name) == 'bias':
        assert kernels <= {'efficient', 'cudnn'}, f'{name} passes a bias; flash cannot take one, yet {kernels} ran'


@pytest.mark.parametrize('family', sorted(CONFIGS))
def test_amp_optim_wrapper_trains_on_cuda(family: str, tmp_path) -> None:
    from mmengine.optim import AmpOptimWrapper
    from mmengine.runner import Runner

    from vispe.engine.config import enable_amp, load_config, without_validation

    cfg = load_config(CONFIGS[family](tmp_path), work_dir=str(tmp_path / 'work'))
    enable_amp(cfg)
    without_validation(cfg)  # training is what is tested
    runner = Runner.from_cfg(cfg)
    dtypes = []
    runner.model.backbone.blocks[0].attn.qkv.register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    runner.train()
    assert isinstance(runner.optim_wrapper, AmpOptimWrapper) and runner.optim_wrapper.cast_dtype == torch.bfloat16
    assert dtypes and set(dtypes) == {torch.bfloat16}
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) and torch.isfinite(torch.as_tensor(losses)).all()


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed', 'irpe', 'harope', 'comrope_ap', 'gta', 'rope3d'])
def test_compiled_forward_matches_eager_on_cuda(name: str) -> None:
    model, inputs = model_and_inputs(name)
    model = model.cuda().eval()
    inputs = tuple(x.cuda() for x in inputs)
    with torch.no_grad():
        eager = first_output(model(*inputs))
        compiled = first_output(torch.compile(model)(*inputs))
    torch.testing.assert_close(compiled, eager, atol=2e-3, rtol=2e-3)


def test_grid_tables_are_cached_per_device() -> None:
    from vispe.positions import grid_positions

    rope = vispe.build_encoding('rope_axial', dim=32, num_heads=2)
    q = torch.randn(1, 2, 12, 16)
    rope.rotate(q, q, grid_positions(3, 4))
    q2, _ = rope.rotate(q.cuda(), q.cuda(), grid_positions(3, 4, device=torch.device('cuda')))
    devices = sorted(str(t.device) for t in rope._cache._tables.values())
    assert devices == ['cpu', 'cuda:0']
    torch.testing.assert_close(q2.cpu(), rope.rotate(q, q, grid_positions(3, 4))[0])
