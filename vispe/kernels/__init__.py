"""Fused kernels shared by the encodings, each a Triton kernel with a PyTorch reference: ``rotary`` (the rotation of q
and k) and ``depthwise`` (LePE's token convolution); ``select`` picks a backend per call."""

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
