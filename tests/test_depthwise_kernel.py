"""The depthwise token conv (``vispe.kernels.depthwise``, LePE's op) against F.conv2d on a channels-first copy,
forward and backward: the Triton kernels run here through Triton's interpreter (CPU tensors), so CI checks their
indexing, border masks, prefix rows and gradients without a GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import vispe
from vispe.encodings.stack import EncodingStack
from vispe.kernels import depthwise
from vispe.kernels.depthwise import depthwise_backend, depthwise_tokens, use_depthwise_backend
from vispe.positions import grid_positions

#: the interpreter truncates float32 to bfloat16 / float16 where the GPU rounds: one unit in the last place
RTOL = {torch.float32: 1e-5, torch.bfloat16: 2**-7, torch.float16: 2**-10}


def reference(x, weight, bias, grid, prefix, dtype):
    """The conv in ``dtype`` on a channels-first copy of the patch tokens, zero rows for the prefix: the plainest
    statement. The Triton kernel accumulates in float32 registers; F.conv2d computes in the input dtype."""
    B, T, C = x.shape
    feat = x[:, prefix:].to(dtype).transpose(1, 2).reshape(B, C, *grid).contiguous()
    bias = None if bias is None else bias.to(dtype)
    out = F.conv2d(feat, weight.to(dtype), bias, padding=weight.shape[-1] // 2, groups=C)
    term = out.reshape(B, C, -1).transpose(1, 2)
    return torch.cat([term.new_zeros(B, prefix, C), term], 1).to(x.dtype)


def run(backend, x, weight, bias, grid, prefix, dtype=None):
    x, weight = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    bias = None if bias is None else bias.detach().clone().requires_grad_()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(x.device)
    if backend == 'reference':
        out = reference(x, weight, bias, grid, prefix, dtype)
    else:
        with use_depthwise_backend(backend):
            out = depthwise_tokens(x, weight, bias, grid, prefix)
    (out.float() * g).sum().backward()
    return out, x.grad, weight.grad, (None if bias is None else bias.grad)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ('grid', 'prefix', 'kernel', 'channels', 'layout', 'with_bias'),
    [
        ((5, 7), 1, 3, 12, 'qkv', True),  # cls token, a non-square grid, the qkv slice read in place
        ((4, 4), 0, 5, 70, 'contiguous', True),  # no prefix, K=5, channels over one 64-wide block
        ((9, 3), 5, 3, 6, 'qkv', False),  # cls + 4 registers, no bias, more tokens than one row of blocks
        ((1, 1), 1, 7, 8, 'contiguous', True),  # a filter wider than the grid: every tap but the centre masked
    ],
)
@pytest.mark.parametrize('backend', ['triton', 'torch'])
def test_depthwise_matches_conv2d_forward_and_backward(
    backend, dtype, grid, prefix, kernel, channels, layout, with_bias
):
    if backend == 'triton':
        pytest.importorskip('triton')
    gen = torch.Generator().manual_seed(0)
    B, T = 2, prefix + grid[0] * grid[1]
    if layout == 'qkv':  # timm's v: the last third of each token's fused (q, k, v), token stride 3C
        x = torch.randn(B, T, 3, channels, generator=gen).to(dtype)[:, :, 2]
        assert x.stride(1) == 3 * channels
    else:
        x = torch.randn(B, T, channels, generator=gen).to(dtype)
    weight = torch.randn(channels, 1, kernel, kernel, generator=gen)
    bias = torch.randn(channels, generator=gen) if with_bias else None
    ref = run('reference', x, weight, bias, grid, prefix, torch.float32 if backend == 'triton' else dtype)
    got = run(backend, x, weight, bias, grid, prefix)
    assert got[0].dtype == dtype and got[0].shape == (B, T, channels)
    names = ('output', 'grad x', 'grad weight', 'grad bias')
    for name, a, b in zip(names, got, ref):
        if b is None:
            assert a is None, name
            continue
        rtol = RTOL[dtype] if name in ('output', 'grad x') else 1e-4  # the filter's gradients are float32 sums
        # F.conv2d accumulates in half precision on CPU, in another order for a channels-last input: a few units
        atol = 1e-5 if dtype == torch.float32 else (4 if backend == 'triton' else 16) * RTOL[dtype]
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol, msg=lambda m, n=name: f'{n}: {m}')
    assert torch.all(got[0][:, :prefix] == 0) and torch.all(got[1][:, :prefix] == 0)  # prefix: no term, no gradient


def test_backend_choice_and_bad_shapes():
    x = torch.randn(2, 10, 4)
    assert depthwise_backend(x) == 'torch'  # CPU eager: F.conv2d
    with use_depthwise_backend('triton'):
        assert depthwise_backend(x) == 'triton'
    with pytest.raises(ValueError, match="depthwise backend must be one of \\('triton', 'torch'\\)"):
        with use_depthwise_backend('cudnn'):
            pass
    with use_depthwise_backend('triton'), pytest.raises(ValueError, match='not 1 prefix \\+ 3x4 tokens of 4'):
        depthwise_tokens(torch.randn(2, 12, 4), torch.randn(4, 1, 3, 3), None, (3, 4), 1)


def test_a_broken_kernel_warns_once_and_falls_back(monkeypatch):
    class Broken:
        KERNEL_DTYPES = (torch.float32,)

        @staticmethod
        def conv(*args, **kwargs):
            raise RuntimeError('no kernel image is available for execution on the device')

    depthwise.kernel_works.cache_clear()
    try:
        if depthwise._triton_launch() is not None:
            assert depthwise.kernel_works(torch.device('cpu')) is True
            depthwise.kernel_works.cache_clear()
        monkeypatch.setattr(depthwise, '_triton_launch', lambda: Broken)
        with pytest.warns(
            RuntimeWarning, match='depthwise kernel does not work on cpu .RuntimeError: no kernel.*F.conv2d'
        ):
            assert depthwise.kernel_works(torch.device('cpu')) is False
        assert depthwise.kernel_works(torch.device('cpu')) is False  # cached: no second warning
    finally:
        depthwise.kernel_works.cache_clear()


def test_lepe_model_is_the_same_on_both_backends():
    """A LePE ViT (cls token, timm's fused qkv) gives the same output and parameter gradients through the Triton
    kernel as through F.conv2d: the hook hands the kernel the qkv slice and takes its token-major term."""
    pytest.importorskip('triton')
    torch.manual_seed(0)
    model = vispe.create_model('vit_tiny_patch16_224', encoding='lepe', img_size=64, depth=2, num_classes=3)
    x = torch.randn(2, 3, 64, 64)
    results = []
    for backend in ('torch', 'triton'):
        model.zero_grad()
        with use_depthwise_backend(backend):
            out = model(x)
        out.square().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if 'pe.' in n}
        results.append((out.detach(), grads))
    (out_t, grads_t), (out_k, grads_k) = results
    assert len(grads_t) == 4  # two layers' conv weight and bias
    torch.testing.assert_close(out_k, out_t, rtol=1e-5, atol=1e-5)
    for name in grads_t:
        torch.testing.assert_close(
            grads_k[name], grads_t[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f'{n}: {m}'
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device (tools/gpu_check.sh runs these)')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_kernel_matches_conv2d(dtype):
    """The compiled Triton kernels on the GPU (the backend CUDA tensors take by default) against F.conv2d in float32."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1 + 14 * 14, 3, 384, generator=gen).to(dtype)[:, :, 2].cuda()  # ViT-S's v in its qkv slice
    weight, bias = torch.randn(384, 1, 3, 3, generator=gen).cuda(), torch.randn(384, generator=gen).cuda()
    assert depthwise_backend(x) == 'triton'
    ref = run('reference', x, weight, bias, (14, 14), 1, torch.float32)
    got = run(None, x, weight, bias, (14, 14), 1)
    for name, a, b in zip(('output', 'grad x', 'grad weight', 'grad bias'), got, ref):
        atol = 1e-4 if dtype == torch.float32 else 8 * RTOL[dtype]
        torch.testing.assert_close(
            a.float(), b.float(), rtol=4 * RTOL[dtype], atol=atol, msg=lambda m, n=name: f'{n}: {m}'
        )


def test_a_token_major_term_keeps_the_attention_output_token_major():
    """LePE's term comes back token-major and is added first, so the sum is token-major too and the attention's
    (B, H, N, d) -> (B, N, C) reshape before the projection is a view, not another copy."""
    enc = vispe.build_encoding('lepe', dim=32, num_heads=4)
    stack = EncodingStack(torch.nn.ModuleDict({'lepe': enc}))
    qkv = torch.randn(2, 1 + 12, 3, 4, 8).permute(2, 0, 3, 1, 4)  # timm's fused qkv, split
    out = torch.randn(2, 4, 13, 8)  # SDPA's (B, H, N, d) output
    summed = stack.value_terms(out, qkv[2], grid_positions(3, 4, num_prefix=1))
    assert summed.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(summed, out + enc.value_term(qkv[2], grid_positions(3, 4, num_prefix=1)))
