"""A depthwise K x K convolution (stride 1, zero padding) over the patch tokens of a token-major sequence (LePE).

Input (B, T, C), channels contiguous, any batch and token strides (timm's fused qkv slice is read in place); the tokens
after ``num_prefix`` form an (h, w) grid. Output (B, T, C): the conv on the patch tokens, zero on the prefix. Backends
(``depthwise_backend``), equal to float32 rounding, forward and backward: ``triton`` (CUDA eager, ``depthwise_triton``:
float32 accumulation; the backward is the flipped-filter conv and deterministic per-block partial sums for the
filter; checked once per device, else a warning and ``torch``) and ``torch`` (``F.conv2d`` on a channels-last view;
on CPU, and when compiling, exporting or tracing).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from vispe.kernels.select import ForcedBackend, probe_kernel, triton_module

#: the backends of ``depthwise_backend``; ``VISPE_DEPTHWISE_BACKEND`` or ``use_depthwise_backend`` force one eagerly
DEPTHWISE_BACKENDS = ('triton', 'torch')
_FORCED = ForcedBackend('depthwise', DEPTHWISE_BACKENDS, 'VISPE_DEPTHWISE_BACKEND')


def _triton_launch() -> Any:
    return triton_module('depthwise_triton')


def use_depthwise_backend(name: str | None):
    """Force a backend for eager calls inside the block (None: per call); ``triton`` on CPU runs the interpreter."""
    return _FORCED.use(name)


def depthwise_backend(x: torch.Tensor) -> str:
    """``torch`` when compiling, exporting or FX-tracing, else a forced one, else ``triton`` where it works, else
    ``torch``."""
    return _FORCED.choose(x, _triton_launch, kernel_works, 'torch')


@functools.cache
def kernel_works(device: torch.device) -> bool:
    """Whether the Triton kernels build and agree with the reference on ``device`` (checked once per device)."""

    def check() -> bool:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 1 + 3 * 5, 8, generator=gen).to(device)
        weight, bias = torch.randn(8, 1, 3, 3, generator=gen).to(device), torch.randn(8, generator=gen).to(device)
        got = _triton_launch().conv(x, weight, bias, (3, 5), 1)
        return torch.allclose(got, _conv_torch(x, weight, bias, (3, 5), 1), atol=1e-5, rtol=1e-5)

    return probe_kernel('depthwise', device, check, 'depthwise convs use F.conv2d', 'VISPE_DEPTHWISE_BACKEND=torch')


def _conv_torch(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, grid: tuple[int, int], num_prefix: int
) -> torch.Tensor:
    channels = weight.shape[0]
    feat = x[:, num_prefix:].unflatten(1, grid).permute(0, 3, 1, 2)  # (B, C, h, w), channels-last strides
    if bias is not None:  # as autocast would: float32 parameters on low-precision values (the Triton path takes both)
        bias = bias.to(feat.dtype)
    out = F.conv2d(feat, weight.to(feat.dtype), bias, padding=weight.shape[-1] // 2, groups=channels)
    term = out.permute(0, 2, 3, 1).flatten(1, 2)  # the channels-last output as (B, h*w, C) tokens: a view
    return F.pad(term, (0, 0, num_prefix, 0)) if num_prefix else term


class _Depthwise(torch.autograd.Function):
    """The Triton conv with its hand-written backward (the flipped-filter conv, the filter's partial sums)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        grid: tuple[int, int],
        num_prefix: int,
    ) -> torch.Tensor:
        ctx.grid, ctx.num_prefix = grid, num_prefix
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight, bias)
        return _triton_launch().conv(x, weight, bias, grid, num_prefix)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias = ctx.saved_tensors
        kernels, n = _triton_launch(), ctx.num_prefix
        d_x = kernels.conv(g, weight.flip(-2, -1), None, ctx.grid, n) if ctx.needs_input_grad[0] else None
        d_w = kernels.weight_grad(x, g, weight.shape[-1], ctx.grid, n).to(weight.dtype) if x is not None else None
        d_b = g[:, n:].sum((0, 1), dtype=torch.float32).to(bias.dtype) if ctx.needs_input_grad[2] else None
        return d_x, d_w, d_b, None, None


def depthwise_tokens(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    grid: tuple[int, int],
    num_prefix: int = 0,
) -> torch.Tensor:
    """The depthwise conv (``weight`` (C, 1, K, K), odd K, padding K // 2; ``bias`` (C,) or None) of the ``grid`` patch
    tokens of ``x`` (B, num_prefix + h*w, C): (B, T, C), zero on the prefix."""
    backend = depthwise_backend(x)
    if backend == 'torch':
        return _conv_torch(x, weight, bias, grid, num_prefix)
    if x.shape[1] != num_prefix + grid[0] * grid[1] or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f'depthwise_tokens: x {tuple(x.shape)} is not {num_prefix} prefix + {grid[0]}x{grid[1]} tokens of '
            f"{weight.shape[0]} channels (the weight's); pass the grid and prefix count of these tokens"
        )
    return _Depthwise.apply(x, weight, bias, grid, num_prefix)


__all__ = ['DEPTHWISE_BACKENDS', 'depthwise_backend', 'depthwise_tokens', 'kernel_works', 'use_depthwise_backend']
