"""Positional encodings: one family per file, all registered in ``vispe.registry.ENCODINGS``."""

from vispe.encodings import (  # noqa: F401  (fill the registry)
    absolute,
    alibi,
    camera,
    comrope,
    conditional,
    fourier,
    gta,
    harope,
    irpe,
    lepe,
    petr,
    points,
    rope,
)
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
