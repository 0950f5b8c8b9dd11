"""Positional encodings: one family per file, all registered in ``vispe.registry.ENCODINGS``."""

from vispe.encodings import absolute, comrope, conditional, fourier, harope, irpe, lepe, points, rope  # noqa: F401  (fill the registry)
from vispe.encodings.base import ATTENTION_HOOKS, HOOKS, Encoding
from vispe.encodings.build import build_encoding, encoding_class, list_encodings, normalize_spec

__all__ = [
    'ATTENTION_HOOKS',
    'HOOKS',
    'Encoding',
    'build_encoding',
    'encoding_class',
    'list_encodings',
    'normalize_spec',
]
