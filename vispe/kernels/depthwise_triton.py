"""The Triton kernels behind ``vispe.kernels.depthwise`` (imported only where Triton is installed).

One program takes ``BLOCK_T`` patch tokens and ``BLOCK_C`` channels, loads each of the K * K neighbours (zero outside
the grid) and accumulates ``weight * x`` in float32. Flipped weights give the input's gradient; ``WEIGHT_GRAD`` writes
per-program float32 partial sums of ``g * x(shifted)`` for the filter's. No ``from __future__ import annotations``:
Triton reads ``tl.constexpr`` annotations as objects.
"""

import functools

import torch
import triton
import triton.language as tl

from vispe.kernels.select import jitted

#: input dtypes the kernel takes (anything else goes to the PyTorch path)
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK_T, BLOCK_C = 64, 64


# For each of the K * K taps, the neighbours' channels of BLOCK_T patch tokens x BLOCK_C channels (zero outside the
# grid). Conv: o = bias + sum over taps of w * x(shifted). WEIGHT_GRAD: for the output gradient g (strides so_*),
# this program's partial sum of g * x(shifted) per tap and channel, into p.
def _taps_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    o_ptr,
    g_ptr,
    p_ptr,
    prefix,
    height,
    width,
    channels,
    sx_b,
    sx_t,
    so_b,
    so_t,
    K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    WEIGHT_GRAD: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)  # patch token, row-major on the grid
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    t_ok = t < height * width
    c_ok = c < channels
    y = t // width
    x = t % width
    here = (b * so_b + (prefix + t).to(tl.int64) * so_t)[:, None] + c[None, :]
    mask = t_ok[:, None] & c_ok[None, :]
    if WEIGHT_GRAD:
        g = tl.load(g_ptr + here, mask=mask, other=0.0).to(tl.float32)
        part = (b * tl.num_programs(0) + tl.program_id(0)) * (K * K * channels)  # this program's (K * K, C) sums
    else:
        acc = tl.full([BLOCK_T, BLOCK_C], 0.0, tl.float32)
        if HAS_BIAS:
            acc += tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    for i in tl.static_range(K * K):
        yy = y + (i // K - K // 2)
        xx = x + (i % K - K // 2)
        ok = t_ok & (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
        src = tl.where(ok, prefix + yy * width + xx, 0).to(tl.int64)
        v = tl.load(x_ptr + b * sx_b + src[:, None] * sx_t + c[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0)
        if WEIGHT_GRAD:
            # tl.sum spelled as the reduce it is: Triton's interpreter, run per call here, only patches the builtin
            total = tl.reduce(g * v.to(tl.float32), 0, tl.standard._sum_combine)
            tl.store(p_ptr + part + i * channels + c, total, mask=c_ok)
        else:
            w = tl.load(w_ptr + c * (K * K) + i, mask=c_ok, other=0.0)
            acc += v.to(tl.float32) * w.to(tl.float32)[None, :]
    if not WEIGHT_GRAD:
        tl.store(o_ptr + here, acc.to(o_ptr.dtype.element_ty), mask=mask)


@functools.cache
def kernel(interpret: bool):
    """The kernel for CUDA tensors, or Triton's interpreter for CPU ones (``vispe.kernels.select.jitted``)."""
    return jitted(_taps_kernel, interpret)


def _grid(B: int, h: int, w: int, C: int) -> tuple[int, int, int]:
    return triton.cdiv(h * w, BLOCK_T), triton.cdiv(C, BLOCK_C), B


def conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, grid: tuple[int, int], prefix: int
) -> torch.Tensor:
    """``x`` (B, T, C), channels contiguous; ``weight`` (C, 1, K, K); ``bias`` (C,) or None -> (B, T, C) in x's dtype,
    zero on the ``prefix`` tokens."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    B, T, C = x.shape
    h, w = grid
    out = torch.empty(B, T, C, dtype=x.dtype, device=x.device)
    if prefix:
        out[:, :prefix].zero_()
    K = weight.shape[-1]
    kernel(not x.is_cuda)[_grid(B, h, w, C)](
        x, weight.contiguous(), bias if bias is not None else weight, out, out, out,
        prefix, h, w, C, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        K=K, HAS_BIAS=bias is not None, WEIGHT_GRAD=False, BLOCK_T=BLOCK_T, BLOCK_C=BLOCK_C,
    )  # fmt: skip
    return out


def weight_grad(x: torch.Tensor, g: torch.Tensor, K: int, grid: tuple[int, int], prefix: int) -> torch.Tensor:
    """The float32 (C, 1, K, K) weight gradient from the input ``x`` and output gradient ``g``, both (B, T, C)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    g = g if g.stride(-1) == 1 else g.contiguous()
    B, T, C = x.shape
    h, w = grid
    launch = _grid(B, h, w, C)
    partials = torch.empty(B * launch[0], K * K, C, dtype=torch.float32, device=x.device)
    kernel(not x.is_cuda)[launch](
        x, partials, partials, partials, g, partials,
        prefix, h, w, C, x.stride(0), x.stride(1), g.stride(0), g.stride(1),
        K=K, HAS_BIAS=False, WEIGHT_GRAD=True, BLOCK_T=BLOCK_T, BLOCK_C=BLOCK_C,
    )  # fmt: skip
    return partials.sum(0).t().reshape(C, 1, K, K)


__all__ = ['KERNEL_DTYPES', 'conv', 'kernel', 'weight_grad']
