"""The rotary kernel (``vispe.kernels.rotary``) against its plain PyTorch reference, forward and backward, for every
input dtype, q/k layout and table shape the encodings use. The Triton kernel runs here through Triton's interpreter
(CPU tensors), so CI checks its indexing, masking and backward without a GPU; the complex CPU path is checked the
same way. On a GPU, tests/test_gpu.py runs the compiled kernel against the same reference."""

from __future__ import annotations

import pytest
import torch

import vispe
from vispe.kernels import rotary
from vispe.kernels.rotary import (
    cos_sin_table,
    rotary_backend,
    rotate_pairs,
    rotate_qk,
    rotate_qk_rows,
    use_rotary_backend,
)
from vispe.positions import grid_positions

B, H, N, D, R = 2, 3, 7, 12, 5  # D / 2 = 6 pairs: not a power of two, so the kernel's pair mask is exercised
#: Triton's interpreter casts float32 to bfloat16 / float16 by truncation where the GPU rounds to nearest: one unit
#: in the last place, relative 2^-7 / 2^-10 (float32: rounding of the same products)
RTOL = {torch.float32: 1e-5, torch.bfloat16: 2**-7, torch.float16: 2**-10}
TABLES = ('shared', 'per_head', 'per_sample', 'full', 'rows_shared', 'rows_per_head')
BACKENDS = ('triton', 'complex')


def inputs(dtype: torch.dtype, layout: str, table_kind: str, seed: int = 0):
    """q, k (B, H, N, D) in ``layout``; a table (or rows) of ``table_kind`` from angles that require grad; an index."""
    gen = torch.Generator().manual_seed(seed)
    if layout == 'token_major':  # timm's q and k: views of the (B, N, 3, H, D) qkv output
        qkv = torch.randn(B, N, 3, H, D, generator=gen).to(dtype).permute(2, 0, 3, 1, 4)
        q, k = qkv[0], qkv[1]
    else:
        q, k = (torch.randn(B, H, N, D, generator=gen).to(dtype) for _ in range(2))
    shape = {
        'shared': (N, D // 2),
        'per_head': (H, N, D // 2),
        'per_sample': (B, 1, N, D // 2),
        'full': (B, H, N, D // 2),
        'rows_shared': (R, 1, D // 2),
        'rows_per_head': (R, H, D // 2),
    }[table_kind]
    angles = (torch.randn(shape, generator=gen) * 3).requires_grad_()
    index = torch.randint(R, (B, N), generator=gen) if table_kind.startswith('rows') else None
    return q, k, angles, index


def run(backend: str, q, k, angles, index, scale, inverse: bool = False):
    """Output, and gradients of q, k and the angles, of one rotation through ``backend``."""
    q, k = (x.detach().clone().requires_grad_() for x in (q, k))
    angles = angles.detach().clone().requires_grad_()
    weights = torch.randn(2, B, H, N, D, generator=torch.Generator().manual_seed(1)).to(q.device)
    with use_rotary_backend(backend):
        table = cos_sin_table(angles)
        if index is not None:
            out = rotate_qk_rows(q, k, table, index, scale)
        else:
            out = rotate_qk(q, k, table, scale, inverse=inverse)
    sum((o.float() * w).sum() for o, w in zip(out, weights)).backward()
    return (*out, q.grad, k.grad, angles.grad)


def assert_same(got, ref, dtype: torch.dtype) -> None:
    names = ('q', 'k', 'grad q', 'grad k', 'grad angles')
    for name, a, b in zip(names, got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        rtol = RTOL[dtype] if name != 'grad angles' else 1e-4  # the angles' gradient is a float32 sum
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=1e-5, msg=lambda m, n=name: f'{n}: {m}')


@pytest.mark.parametrize('table_kind', TABLES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize('backend', BACKENDS)
def test_kernel_matches_the_reference_forward_and_backward(backend: str, dtype: torch.dtype, table_kind: str) -> None:
    if backend == 'triton':
        pytest.importorskip('triton')
    layout = 'token_major' if TABLES.index(table_kind) % 2 == 0 else 'contiguous'
    q, k, angles, index = inputs(dtype, layout, table_kind)
    for scale in (1.0, 1.3, torch.rand(B, 1, N, 1, generator=torch.Generator().manual_seed(2)) + 0.5):
        ref = run('torch', q, k, angles, index, scale)
        got = run(backend, q, k, angles, index, scale)
        assert_same(got, ref, dtype)
        # outputs keep the input dtype and timm's token-major memory (what SDPA and the backward see)
        assert got[0].dtype == dtype and got[0].shape == (B, H, N, D)


@pytest.mark.parametrize('backend', BACKENDS)
def test_inverse_undoes_the_rotation_and_has_its_gradients(backend: str) -> None:
    if backend == 'triton':
        pytest.importorskip('triton')
    q, k, angles, _ = inputs(torch.float32, 'token_major', 'per_head')
    assert_same(run(backend, q, k, angles, None, 1.0, True), run('torch', q, k, angles, None, 1.0, True), torch.float32)
    table = cos_sin_table(angles.detach())
    with use_rotary_backend(backend):
        back = rotate_pairs(rotate_pairs(q, table), table, inverse=True)
    torch.testing.assert_close(back, q, atol=1e-5, rtol=1e-5)


def test_single_tensor_and_strided_inputs_take_the_kernel() -> None:
    """One tensor (k absent: the kernel's TWO off) and an input whose channels are not contiguous (copied first)."""
    pytest.importorskip('triton')
    x = torch.randn(B, H, N, 2 * D)[..., ::2]  # channel stride 2
    table = cos_sin_table(torch.randn(N, D // 2))
    with use_rotary_backend('triton'):
        got = rotate_pairs(x, table, 0.7)
    with use_rotary_backend('torch'):
        ref = rotate_pairs(x, table, 0.7)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)


def test_prefix_rows_pass_tokens_through_bit_for_bit() -> None:
    """Rows (1, 0) of a table with prefix tokens leave those tokens' channels exactly as they were, every backend."""
    q = torch.randn(B, H, 2 + N, D, dtype=torch.bfloat16)
    table = cos_sin_table(torch.randn(N, D // 2), num_prefix=2)
    backends = ('torch', 'complex') + (('triton',) if rotary._triton_launch() is not None else ())
    for backend in backends:
        with use_rotary_backend(backend):
            out = rotate_pairs(q, table)
        assert torch.equal(out[..., :2, :], q[..., :2, :]), backend


def test_backend_choice() -> None:
    """CPU eager: the complex product; compiled: the real reference (no complex dtype); a forced name is checked."""
    x = torch.randn(1, 1, 2, 4)
    assert rotary_backend(x) == 'complex'
    seen = []

    @torch.compile(backend='eager', fullgraph=True)
    def compiled(t: torch.Tensor) -> torch.Tensor:
        seen.append(rotary_backend(t))
        return t

    compiled(x)
    assert seen == ['torch']
    with use_rotary_backend('torch'):
        assert rotary_backend(x) == 'torch'
    with pytest.raises(ValueError, match="rotary backend must be one of .*'triton'"):
        with use_rotary_backend('cuda'):
            pass


def test_grid_tables_are_cached_per_device_of_the_positions() -> None:
    """The CPU analogue of tests/test_gpu.py's check: a module whose buffers stay on the CPU rotates positions on
    another device (meta here) with its frequencies moved there, and caches one table per device."""
    rope = vispe.build_encoding('rope_axial', dim=32, num_heads=2)
    q = torch.randn(1, 2, 12, 16)
    rope.rotate(q, q, grid_positions(3, 4))
    out, _ = rope.rotate(q.to('meta'), q.to('meta'), grid_positions(3, 4, device=torch.device('meta')))
    assert out.device.type == 'meta' and out.shape == q.shape
    devices = sorted(str(t.device) for t in rope._cache._tables.values())
    assert devices == ['cpu', 'meta']


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device (tools/gpu_check.sh runs these)')
@pytest.mark.parametrize('table_kind', TABLES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_kernel_matches_the_reference(dtype: torch.dtype, table_kind: str) -> None:
    """The compiled Triton kernel on the GPU (the backend CUDA tensors take by default) against the reference."""
    q, k, angles, index = inputs(dtype, 'token_major', table_kind)
    q, k, angles = (t.cuda() for t in (q, k, angles))
    index = index.cuda() if index is not None else None
    assert rotary_backend(q) == 'triton'
    for scale in (1.0, 1.3, torch.rand(B, 1, N, 1, device='cuda') + 0.5):
        ref = run('torch', q, k, angles, index, scale)
        got = run('triton', q, k, angles, index, scale)
        assert_same(got, ref, dtype)


def test_a_kernel_that_fails_its_check_warns_once_and_the_complex_path_takes_over(monkeypatch) -> None:
    """The check passes for the real kernel (through the interpreter here); a Triton that cannot build it (simulated)
    gives one warning naming the error, and the device then takes the complex path instead of failing."""

    class Broken:
        KERNEL_DTYPES = (torch.float32,)

        @staticmethod
        def launch(*args, **kwargs):
            raise RuntimeError('PTX .version 9.9 does not support .target sm_90')

    rotary.kernel_works.cache_clear()
    try:
        if rotary._triton_launch() is not None:
            assert rotary.kernel_works(torch.device('cpu')) is True
            rotary.kernel_works.cache_clear()
        monkeypatch.setattr(rotary, '_triton_launch', lambda: Broken)
        with pytest.warns(RuntimeWarning, match='does not work on cpu .RuntimeError: PTX .version 9.9.*complex'):
            assert rotary.kernel_works(torch.device('cpu')) is False
        assert rotary.kernel_works(torch.device('cpu')) is False  # cached: no second warning, no second try
    finally:
        rotary.kernel_works.cache_clear()
