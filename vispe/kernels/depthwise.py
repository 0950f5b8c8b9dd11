"""A depthwise K x K convolution (stride 1, zero padding) over the patch tokens of a token-major sequence, the one op
of LePE's value term (and of any encoding that convolves tokens on their grid).

Input (B, T, C), channels contiguous, any batch and token strides (the value slice of timm's fused qkv output is
read in place, token stride 3C): the tokens after ``num_prefix`` form an (h, w) grid. Output (B, T, C), token-major:
the conv on the patch tokens, zero on the prefix tokens.

Backends, chosen per call (``depthwise_backend``):

- ``triton``: CUDA tensors in eager mode. One kernel reads the tokens where they lie, accumulates the K * K taps in
  float32 registers and writes the token-major result, prefix rows included (``vispe.kernels.depthwise_triton``):
  one read of the values and one write of the term, no channels-first copy, no transpose and no pad pass. Its
  backward is the same kernel with the flipped filter for the input's gradient, and one kernel writing per-block
  float32 partial sums for the filter's (summed deterministically, no atomics); the bias's gradient is one sum.
  Checked once per device against the reference (``kernel_works``); a kernel that does not build or does not agree
  gives one warning and that device takes the ``torch`` path. GPU cost: not measured on a GPU yet (the tests run it
  through Triton's interpreter).
- ``torch``: ``F.conv2d`` on the tokens seen as a channels-last (B, C, h, w) view (cuDNN / oneDNN pick their
  channels-last depthwise kernels; they copy a strided view into a packed one first), its channels-last output seen
  as tokens again without a copy, one pad for the prefix rows. Taken on CPU, under ``torch.compile`` /
  ``torch.export`` (Inductor lays the conv out itself) and in FX traces. CPU cost: LePE at 1.02x ape_learned
  (ViT-S/16, docs).

Both give the same values to float32 rounding (``tests/test_depthwise_kernel.py``, forward and backward).
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
    """The module ``vispe.kernels.depthwise_triton``, or None without Triton."""
    return triton_module('depthwise_triton')


def use_depthwise_backend(name: str | None):
    """Force a backend for eager calls inside the block (None: choose per call); ``triton`` on CPU tensors runs
    Triton's interpreter (tests)."""
    return _FORCED.use(name)


def depthwise_backend(x: torch.Tensor) -> str:
    """``torch`` when compiling, exporting or FX-tracing; else a forced one; else ``triton`` for CUDA tensors in a
    dtype the kernel takes (Triton installed, the kernel checked on that device), ``torch`` otherwise."""
    return _FORCED.choose(x, _triton_launch, kernel_works, 'torch')


@functools.cache
def kernel_works(device: torch.device) -> bool:
    """Whether the Triton kernels build and agree with the reference on ``device`` (checked once per device; see
    ``vispe.kernels.select.probe_kernel``)."""

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
    """The depthwise conv (``weight`` (C, 1, K, K), odd K, zero padding K // 2; ``bias`` (C,) or None) of the
    ``grid`` = (h, w) patch tokens of ``x`` (B, num_prefix + h*w, C): (B, T, C), zero on the prefix tokens."""
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
