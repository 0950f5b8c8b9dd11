"""Fused kernels behind the encodings, one family per module: ``rotary`` (the rotation of every rotary encoding) and
``depthwise`` (LePE's depthwise conv on the tokens). Each family has a plain PyTorch reference, the path under
compile, export and FX tracing, and a Triton kernel in ``<family>_triton`` (imported only where Triton is installed)
that gives the reference's values forward and backward. ``select`` chooses per call between them: the reference when
tracing, a backend forced by ``VISPE_<FAMILY>_BACKEND`` or ``use_<family>_backend``, else Triton on CUDA where it
imports and passes its once-per-device check against the reference, else the family's fallback."""

from vispe.kernels.rotary import (
    ROTARY_BACKENDS,
    rotary_backend,
    rotary_table,
    rotate_pairs,
    rotate_qk,
    rotate_rows,
    use_rotary_backend,
)

__all__ = [
    'ROTARY_BACKENDS',
    'rotary_backend',
    'rotary_table',
    'rotate_pairs',
    'rotate_qk',
    'rotate_rows',
    'use_rotary_backend',
]
