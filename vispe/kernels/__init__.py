"""Kernels shared by the encodings: the fused rotary kernel (``rotary``), Triton with a plain PyTorch reference."""

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
