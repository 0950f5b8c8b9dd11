"""bf16 autocast: every registered encoding, in the backbone that serves it, keeps its angles, frequencies and
matrix exponentials in float32, stays close to the float32 model and has finite gradients; and ``--amp`` training
through the mmengine Runner runs the forward in bf16 for every backbone family (on CPU: vispe's BF16OptimWrapper;
on a GPU: mmengine's AmpOptimWrapper, exercised by tools/gpu_check.sh)."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import ROOT, changed_keys, tiny_point_config
from test_camera_tools import tiny_camera_config
from test_compile import model_and_inputs
from test_tools import tiny_config
from torch.overrides import TorchFunctionMode

import vispe
from vispe.encodings.comrope import ComRoPEAP
from vispe.encodings.harope import HARoPE

#: functions whose bf16 inputs lose what positional encodings need: a bf16 angle of 100 rad is off by 0.25 rad
PRECISION_SENSITIVE = {'cos', 'sin', 'polar', 'exp', 'matrix_exp', 'view_as_complex', 'atan2', 'log'}


class LowPrecisionCalls(TorchFunctionMode):
    """Records (function, dtype) for every precision-sensitive call that gets a floating input below float32."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: set[tuple[str, str]] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, '__name__', '')
        if name in PRECISION_SENSITIVE:
            for a in args:
                if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float32:
                    self.calls.add((name, str(a.dtype)))
        return func(*args, **(kwargs or {}))


def first_output(out):
    return out if isinstance(out, torch.Tensor) else out[0]


def test_the_recorder_catches_bf16_angles() -> None:
    """The check below can fail: angles from a linear layer under autocast are bf16, and are recorded."""
    layer = torch.nn.Linear(2, 8)
    with torch.autocast('cpu', dtype=torch.bfloat16), LowPrecisionCalls() as rec:
        layer(torch.randn(4, 2)).cos()
    assert rec.calls == {('cos', 'torch.bfloat16')}


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_encoding_under_bf16_autocast(name: str) -> None:
    model, inputs = model_and_inputs(name)
    model.train()
    torch.manual_seed(1)  # the same dropout / jitter draws in both passes
    reference = first_output(model(*inputs)).detach()
    torch.manual_seed(1)
    with torch.autocast('cpu', dtype=torch.bfloat16), LowPrecisionCalls() as rec:
        out = first_output(model(*inputs))
    assert rec.calls == set(), f'{name} computes angles / exponentials in low precision: {sorted(rec.calls)}'
    assert out.dtype == torch.bfloat16, 'autocast did not reach the model: the test would prove nothing'
    err = ((out.float() - reference).norm() / reference.norm()).item()
    assert err < 0.03, f'{name}: bf16 output is {err:.3f} (relative) away from float32'
    out.float().square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize('block_size', [4, 8])
def test_comrope_rotations_are_float32_under_autocast(block_size: int) -> None:
    """The block rotations exp(sum_i A_i x_i) (closed form for b = 4, matrix exponential for b = 8): float32 and
    identical with autocast on and off."""
    enc = ComRoPEAP(dim=32, num_heads=2, block_size=block_size)
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_()
    x = torch.rand(10, 2) * 40
    plain = enc.rotation(x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        cast = enc.rotation(x)
    assert cast.dtype == torch.float32 and torch.equal(cast, plain)


def test_harope_mixing_is_float32_under_autocast() -> None:
    enc = HARoPE(dim=32, num_heads=2)
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=0.3)
    plain = enc.mixing()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        cast = enc.mixing()
    assert all(c.dtype == torch.float32 and torch.equal(c, p) for c, p in zip(cast, plain))


def tiny_dit_config(tmp_path) -> str:
    path = tmp_path / 'dit_tiny.py'
    path.write_text(f"""
_base_ = ['{os.path.join(ROOT, 'configs/dit/dit_tiny_harope_shapes2d.py')}']
model = dict(backbone=dict(depth=1, embed_dim=32, num_heads=2))
train_dataloader = dict(batch_size=8)
train_cfg = dict(max_iters=2, val_interval=100)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=2))
custom_hooks = []  # no EMA: after two iterations its weights would barely differ from the initial ones
""")
    return str(path)


CONFIGS = {
    'vit': lambda tmp: tiny_config(tmp, encoding='rope_mixed'),
    'dit': tiny_dit_config,
    'point': lambda tmp: tiny_point_config(tmp, encoding='rope3d'),
    'camera': lambda tmp: tiny_camera_config(tmp, encoding='gta'),
}


@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(CONFIGS))
def test_runner_trains_in_bf16(family: str, tmp_path) -> None:
    """--amp on CPU: BF16OptimWrapper, the attention's qkv projection runs in bf16, loss finite, weights move
    (a DiT's adaLN-zero gates keep its qkv still for the first steps, so any weight counts)."""
    from mmengine.runner import Runner

    from vispe.engine.amp import BF16OptimWrapper
    from vispe.engine.config import enable_amp, load_config, without_validation

    cfg = load_config(CONFIGS[family](tmp_path), work_dir=str(tmp_path / 'work'))
    enable_amp(cfg, device='cpu')
    without_validation(cfg)  # training is what is tested
    runner = Runner.from_cfg(cfg)
    dtypes = []
    qkv = runner.model.backbone.blocks[0].attn.qkv
    qkv.register_forward_hook(lambda mod, args, out: dtypes.append(out.dtype))
    init = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    assert isinstance(runner.optim_wrapper, BF16OptimWrapper)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) and torch.isfinite(torch.as_tensor(losses)).all()
    assert changed_keys(init, runner.model.state_dict()), 'the optimizer step did not change any weight'
    assert all(p.dtype == torch.float32 for p in runner.model.parameters()), 'autocast must not cast the weights'
