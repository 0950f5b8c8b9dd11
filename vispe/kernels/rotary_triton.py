"""The Triton rotary kernel behind ``vispe.kernels.rotary`` (imported only where Triton is installed).

One program rotates ``BLOCK_R`` (batch, head, token) rows of q and of k: pairs in the input dtype, (cos, sin) from the
float32 table (dense, or a row chosen by a per-token index), rotated in float32. ``INVERSE`` rotates by -angle. No
``from __future__ import annotations``: Triton reads ``tl.constexpr`` annotations as objects.
"""

import functools

import torch
import triton
import triton.language as tl

from vispe.kernels.select import jitted

#: input dtypes the kernel takes (anything else goes to the PyTorch paths)
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _rotary_kernel(
    x1_ptr,
    o1_ptr,
    x2_ptr,
    o2_ptr,
    t_ptr,
    i_ptr,
    s_ptr,
    y1_ptr,
    y2_ptr,
    dt_ptr,
    rows,
    heads,
    tokens,
    pairs,
    sx1_b,
    sx1_h,
    sx1_n,
    sx2_b,
    sx2_h,
    sx2_n,
    so_b,
    so_h,
    so_n,
    st_b,
    st_h,
    st_n,
    si_b,
    si_n,
    ss_b,
    ss_n,
    sy1_b,
    sy1_h,
    sy1_n,
    sy2_b,
    sy2_h,
    sy2_n,
    scale,
    dt_sin_sign,
    TWO: tl.constexpr,
    HAS_INDEX: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    INVERSE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = row < rows
    row = row.to(tl.int64)
    n = row % tokens
    h = (row // tokens) % heads
    b = row // (tokens * heads)
    j = tl.arange(0, BLOCK_P)
    mask = row_ok[:, None] & (j < pairs)[None, :]
    if HAS_INDEX:  # the row of the small table this token takes
        r = tl.load(i_ptr + b * si_b + n * si_n, mask=row_ok, other=0).to(tl.int64)
        t_row = r * st_n + h * st_h
    else:
        t_row = b * st_b + h * st_h + n * st_n
    t_off = t_row[:, None] + 2 * j[None, :]
    factor = tl.full([BLOCK_R, 1], 1.0, tl.float32) * scale
    if HAS_SCALE:  # per token (YaRN in a mixed batch of several scales)
        factor = factor * tl.load(s_ptr + b * ss_b + n * ss_n, mask=row_ok, other=1.0)[:, None]
    cos = tl.load(t_ptr + t_off, mask=mask, other=1.0) * factor
    sin = tl.load(t_ptr + t_off + 1, mask=mask, other=0.0) * factor
    if INVERSE:
        sin = -sin
    pair = 2 * j[None, :]
    out = (b * so_b + h * so_h + n * so_n)[:, None] + pair
    x = (b * sx1_b + h * sx1_h + n * sx1_n)[:, None] + pair
    a0 = tl.load(x1_ptr + x, mask=mask, other=0.0).to(tl.float32)
    a1 = tl.load(x1_ptr + x + 1, mask=mask, other=0.0).to(tl.float32)
    tl.store(o1_ptr + out, (a0 * cos - a1 * sin).to(o1_ptr.dtype.element_ty), mask=mask)
    tl.store(o1_ptr + out + 1, (a0 * sin + a1 * cos).to(o1_ptr.dtype.element_ty), mask=mask)
    if TABLE_GRAD:  # backward: x is the output's gradient g, y the forward's input p; d(cos), d(sin) of this token
        y = (b * sy1_b + h * sy1_h + n * sy1_n)[:, None] + pair
        p0 = tl.load(y1_ptr + y, mask=mask, other=0.0).to(tl.float32)
        p1 = tl.load(y1_ptr + y + 1, mask=mask, other=0.0).to(tl.float32)
        d_cos = a0 * p0 + a1 * p1
        d_sin = a1 * p0 - a0 * p1
    if TWO:
        x = (b * sx2_b + h * sx2_h + n * sx2_n)[:, None] + pair
        a0 = tl.load(x2_ptr + x, mask=mask, other=0.0).to(tl.float32)
        a1 = tl.load(x2_ptr + x + 1, mask=mask, other=0.0).to(tl.float32)
        tl.store(o2_ptr + out, (a0 * cos - a1 * sin).to(o2_ptr.dtype.element_ty), mask=mask)
        tl.store(o2_ptr + out + 1, (a0 * sin + a1 * cos).to(o2_ptr.dtype.element_ty), mask=mask)
        if TABLE_GRAD:
            y = (b * sy2_b + h * sy2_h + n * sy2_n)[:, None] + pair
            p0 = tl.load(y2_ptr + y, mask=mask, other=0.0).to(tl.float32)
            p1 = tl.load(y2_ptr + y + 1, mask=mask, other=0.0).to(tl.float32)
            d_cos += a0 * p0 + a1 * p1
            d_sin += a1 * p0 - a0 * p1
    if TABLE_GRAD:  # one float32 (B, H, N, d/2, 2) entry per token, summed onto the table by the caller
        dt = row[:, None] * (2 * pairs) + 2 * j[None, :]
        tl.store(dt_ptr + dt, d_cos * factor, mask=mask)
        tl.store(dt_ptr + dt + 1, d_sin * factor * dt_sin_sign, mask=mask)


@functools.cache
def kernel(interpret: bool):
    """The kernel for CUDA tensors, or Triton's interpreter for CPU ones (``vispe.kernels.select.jitted``)."""
    return jitted(_rotary_kernel, interpret)


def launch(
    xs: list[torch.Tensor],
    table: torch.Tensor,
    index: torch.Tensor | None,
    scale: float | torch.Tensor,
    inverse: bool,
    inputs: list[torch.Tensor] | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Rotate one or two (B, H, N, d) tensors (any strides) by ``table`` (dense, or rows with ``index``) times ``scale``
    into token-major outputs like timm's q and k. In a backward, ``inputs`` (the forward's) asks for the table's
    per-token float32 gradient (B, H, N, d/2, 2) in the same pass."""
    xs = [x if x.stride(-1) == 1 else x.contiguous() for x in xs]
    ys = [y if y.stride(-1) == 1 else y.contiguous() for y in inputs] if inputs is not None else list(xs)
    B, H, N, d = xs[0].shape
    P = d // 2
    if table.stride(-1) != 1 or table.stride(-2) != 2:
        table = table.contiguous()
    outs = [torch.empty(B, N, H, d, dtype=x.dtype, device=x.device).transpose(1, 2) for x in xs]
    if index is None:
        table = table[(None,) * (5 - table.dim())].expand(B, H, N, P, 2)
        st_b, st_h, st_n = table.stride()[:3]
        idx, si_b, si_n = table, 0, 0  # idx: any pointer, never read
    else:
        st_b, st_h, st_n = 0, (table.stride(1) if table.shape[1] > 1 else 0), table.stride(0)
        idx = index.expand(B, N)
        si_b, si_n = idx.stride()
    if isinstance(scale, torch.Tensor):
        per_token = scale.float().expand(B, 1, N, 1)
        ss_b, ss_n, scale = per_token.stride(0), per_token.stride(2), 1.0
    else:
        per_token, ss_b, ss_n = table, 0, 0  # never read
    x2, o2 = (xs[1], outs[1]) if len(xs) == 2 else (xs[0], outs[0])
    y2 = ys[1] if len(ys) == 2 else ys[0]
    dt = torch.empty(B, H, N, P, 2, dtype=torch.float32, device=xs[0].device) if inputs is not None else table
    rows = B * H * N
    block_p = triton.next_power_of_2(max(P, 1))
    block_r = max(1, min(64, 2048 // block_p))
    grid = (triton.cdiv(rows, block_r),)
    kernel(not xs[0].is_cuda)[grid](
        xs[0], outs[0], x2, o2, table, idx, per_token, ys[0], y2, dt,
        rows, H, N, P,
        *xs[0].stride()[:3], *x2.stride()[:3], *outs[0].stride()[:3],
        st_b, st_h, st_n, si_b, si_n, ss_b, ss_n, *ys[0].stride()[:3], *y2.stride()[:3],
        float(scale), 1.0 if inverse else -1.0,
        TWO=len(xs) == 2, HAS_INDEX=index is not None, HAS_SCALE=per_token is not table, INVERSE=inverse,
        TABLE_GRAD=inputs is not None, BLOCK_R=block_r, BLOCK_P=block_p,
    )  # fmt: skip
    return outs, (dt if inputs is not None else None)


__all__ = ['KERNEL_DTYPES', 'kernel', 'launch']
