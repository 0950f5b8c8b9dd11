"""The one rotation every rotary encoding applies: interleaved channel pairs (x_2j, x_2j+1) of q and k turned by
per-token angles, from a real (cos, sin) table.

Table: float32 (..., N, d/2, 2) of (cos a, sin a) per token and pair (``cos_sin_table``), broadcast over batch and
heads; or rows (R, G, d/2, 2), G = 1 or H, with a (B, N) index of each token's row (``rotate_qk_rows``). Prefix tokens
take (1, 0). The rotation runs in float32 and returns the input dtype; ``scale`` multiplies before the cast; ``inverse``
turns by -a. Backends (``rotary_backend``), equal to the reference to float32 rounding, forward and backward:
``triton`` (CUDA eager, ``rotary_triton``: q and k in one pass, the backward the same kernel at -a; checked once per
device, else a warning and ``complex``), ``complex`` (CPU eager: pairs times the table as complex64) and ``torch``
(the real reference x0 c - x1 s, x0 s + x1 c; under compile, export and FX traces; TorchScript-compatible).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from vispe.kernels.select import ForcedBackend, probe_kernel, triton_module

#: the backends of ``rotary_backend``; ``VISPE_ROTARY_BACKEND`` or ``use_rotary_backend`` force one in eager mode
ROTARY_BACKENDS = ('triton', 'complex', 'torch')
_FORCED = ForcedBackend('rotary', ROTARY_BACKENDS, 'VISPE_ROTARY_BACKEND')


def _triton_launch() -> Any:
    return triton_module('rotary_triton')


def use_rotary_backend(name: str | None) -> contextlib.AbstractContextManager[None]:
    """Force a backend for eager calls inside the block (None: per call); traced graphs always take ``torch``."""
    return _FORCED.use(name)


def rotary_backend(x: torch.Tensor) -> str:
    """The backend of a call on ``x``: ``torch`` when compiling, exporting or FX-tracing; else a forced one; else
    ``triton`` for CUDA tensors the kernel takes; else ``complex``."""
    return _FORCED.choose(x, _triton_launch, kernel_works, 'complex')


@functools.cache
def kernel_works(device: torch.device) -> bool:
    """Whether the Triton kernel compiles and agrees with the reference on ``device`` (checked once per device; else one
    warning and the complex path)."""

    def check() -> bool:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 3, 5, 8, generator=gen).to(device)
        table = cos_sin_table(torch.randn(5, 4, generator=gen)).to(device)
        got = _apply('triton', [x, x], table, None, 1.0, False)
        ref = _rotate_torch([x, x], table, 1.0, False)
        return all(torch.allclose(g, r, atol=1e-5, rtol=1e-5) for g, r in zip(got, ref))

    fallback = 'rotary encodings use the complex PyTorch path'
    return probe_kernel('rotary', device, check, fallback, 'VISPE_ROTARY_BACKEND=complex')


def cos_sin_table(angles: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
    """Angles (..., N, d/2) -> the float32 table (..., num_prefix + N, d/2, 2) of (cos, sin); prefix rows (1, 0)."""
    angles = angles.float()  # a model cast to float64 gives float64 angles; the table stays float32
    cos, sin = angles.cos(), angles.sin()
    if num_prefix:
        cos = F.pad(cos, [0, 0, num_prefix, 0], value=1.0)
        sin = F.pad(sin, [0, 0, num_prefix, 0], value=0.0)
    return torch.stack([cos, sin], dim=-1)


# --- the reference (torch) and complex paths ------------------------------------------------------------------------
def _gather(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows (R, G, d/2, 2) and index (B, T) -> the dense table (B, G, T, d/2, 2)."""
    return rows[index].movedim(1, 2)


def _rotate_torch(
    xs: Sequence[torch.Tensor], table: torch.Tensor, scale: float | torch.Tensor, inverse: bool
) -> tuple[torch.Tensor, ...]:
    cos, sin = table.unbind(-1)
    if isinstance(scale, torch.Tensor) or scale != 1.0:
        cos, sin = cos * scale, sin * scale
    if inverse:
        sin = -sin
    out = []
    for x in xs:
        x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # unflatten: no shape unpacking for FX
        out.append(torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2).type_as(x))
    return tuple(out)


def _pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., d) real -> (..., d/2) complex64 view of its interleaved pairs (a float32 copy first if needed)."""
    x = x.float()
    return torch.view_as_complex((x if x.stride(-1) == 1 else x.contiguous()).unflatten(-1, (-1, 2)))


def _complex(table: torch.Tensor, scale: float | torch.Tensor, inverse: bool) -> torch.Tensor:
    """The table as complex64 (..., d/2), conjugated for ``inverse``, times ``scale`` (a float or per token)."""
    if table.stride(-1) != 1 or table.stride(-2) != 2 or table.storage_offset() % 2:
        table = table.contiguous()
    out = torch.view_as_complex(table)
    if inverse:
        out = out.conj()
    return out * scale if isinstance(scale, torch.Tensor) or scale != 1.0 else out


def _turn(xs: Sequence[torch.Tensor], turn: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(torch.view_as_real(_pairs(x) * turn).flatten(-2).type_as(x) for x in xs)


def _table_grad(
    xs: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    table: torch.Tensor,
    index: torch.Tensor | None,
    scale: float | torch.Tensor,
    inverse: bool,
) -> torch.Tensor:
    """The gradient of the (cos, sin) table: for o = p t, dL/dc + i dL/ds = scale * g conj(p), summed over the entry's
    broadcast (or the tokens of each row); ``inverse`` flips the sin part."""
    acc: torch.Tensor | None = None
    for x, g in zip(xs, grads):
        if g is not None:
            term = _pairs(g) * _pairs(x).conj()
            acc = term if acc is None else acc + term
    assert acc is not None
    d = torch.view_as_real(acc)  # (B, H, T, d/2, 2)
    if isinstance(scale, torch.Tensor):
        d = d * scale.float()[..., None]  # per token (B, 1, T, 1, 1)
    elif scale != 1.0:
        d = d * scale
    if inverse:
        d = d * torch.tensor([1.0, -1.0], device=d.device)
    return _sum_onto(d, table, index)


def _sum_onto(d: torch.Tensor, table: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """Per-token table gradients (B, H, T, d/2, 2) summed onto the table's shape, or onto its rows by ``index``."""
    if index is None:
        return d.sum_to_size(table.shape)
    if table.shape[1] == 1 and d.shape[1] != 1:  # rows shared by the heads
        d = d.sum(1, keepdim=True)
    values = d.movedim(1, 2).reshape(-1, *table.shape[1:])  # (B * T, G, d/2, 2)
    return torch.zeros_like(table).index_add_(0, index.reshape(-1), values)


class _Rotate(torch.autograd.Function):
    """The eager rotation with a hand-written backward (Triton, or CPU complex product of gathered rows), which keeps no
    per-token table; the backward turns the gradients by -a."""

    @staticmethod
    def forward(
        ctx: Any,
        table: torch.Tensor,
        index: torch.Tensor | None,
        scale: float | torch.Tensor,
        inverse: bool,
        backend: str,
        *xs: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        ctx.inverse, ctx.backend = inverse, backend
        ctx.scale = scale if not isinstance(scale, torch.Tensor) else None  # a tensor is saved below
        saved_scale = scale if isinstance(scale, torch.Tensor) else None
        ctx.save_for_backward(table, index, saved_scale, *(xs if ctx.needs_input_grad[0] else ()))
        return _apply(backend, list(xs), table, index, scale, inverse)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        table, index, saved_scale, *xs = ctx.saved_tensors
        scale = saved_scale if ctx.scale is None else ctx.scale
        if ctx.backend == 'triton' and ctx.needs_input_grad[0]:  # the table's gradient in the kernel's pass
            filled = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, xs)]
            turned_all, per_token = _triton_launch().launch(filled, table, index, scale, not ctx.inverse, xs)
            return (_sum_onto(per_token, table, index), None, None, None, None, *turned_all)
        d_table = _table_grad(xs, grads, table, index, scale, ctx.inverse) if ctx.needs_input_grad[0] else None
        present = [g for g in grads if g is not None]
        turned = iter(_apply(ctx.backend, present, table, index, scale, not ctx.inverse))
        d_xs = [next(turned) if g is not None else None for g in grads]
        return (d_table, None, None, None, None, *d_xs)


def _apply(
    backend: str,
    xs: list[torch.Tensor],
    table: torch.Tensor,
    index: torch.Tensor | None,
    scale: float | torch.Tensor,
    inverse: bool,
) -> tuple[torch.Tensor, ...]:
    if not xs:
        return ()
    if backend == 'triton':
        triton = _triton_launch()
        if triton is None:
            raise RuntimeError("rotary backend 'triton' needs the triton package; install it or use 'torch'")
        return tuple(triton.launch(xs, table, index, scale, inverse)[0])
    if index is None:
        return _turn(xs, _complex(table, scale, inverse))
    per_row = scale if not isinstance(scale, torch.Tensor) else 1.0
    turn = _complex(table, per_row, inverse)[index].movedim(1, 2)  # (B, G, T, d/2)
    return _turn(xs, turn * scale if isinstance(scale, torch.Tensor) else turn)  # per token (B, 1, T, 1)


def _rotate(
    xs: Sequence[torch.Tensor],
    table: torch.Tensor,
    index: torch.Tensor | None,
    scale: float | torch.Tensor,
    inverse: bool,
) -> tuple[torch.Tensor, ...]:
    backend = rotary_backend(xs[0])
    if isinstance(scale, torch.Tensor):
        scale = scale.float()  # per token (B, 1, T, 1)
    if backend == 'torch' and index is not None:
        table, index = _gather(table, index), None
    if backend == 'torch':
        out = _rotate_torch(xs, table, scale, inverse)
    elif backend == 'complex' and index is None:  # complex autograd keeps nothing bigger than the table
        out = _turn(xs, _complex(table, scale, inverse))
    else:
        out = _Rotate.apply(table, index, scale, inverse, backend, *xs)
    return tuple(out)


def rotate_qk(
    q: torch.Tensor, k: torch.Tensor, table: torch.Tensor, scale: float | torch.Tensor = 1.0, inverse: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (B, H, N, d) rotated by ``table`` (to (B, H, N, d/2, 2)); ``scale``: a float or (B, 1, N, 1)."""
    out = _rotate((q, k), table, None, scale, inverse)
    return out[0], out[1]


def rotate_pairs(
    x: torch.Tensor, table: torch.Tensor, scale: float | torch.Tensor = 1.0, inverse: bool = False
) -> torch.Tensor:
    """One (B, H, N, d) tensor rotated by ``table``, as ``rotate_qk``."""
    return _rotate((x,), table, None, scale, inverse)[0]


def rotate_qk_rows(
    q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, scale: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (B, H, T, d) rotated per token by row ``index`` (B, T) of ``rows`` (R, G, d/2, 2), G = 1 or H, without
    building the dense table."""
    out = _rotate((q, k), rows, index, scale, False)
    return out[0], out[1]


__all__ = [
    'ROTARY_BACKENDS',
    'kernel_works',
    'rotary_backend',
    'cos_sin_table',
    'rotate_pairs',
    'rotate_qk',
    'rotate_qk_rows',
    'use_rotary_backend',
]
