"""Positional encodings: one family per file, all registered in ``vispe.registry.ENCODINGS``."""

from vispe.encodings import (  # noqa: F401  (fill the registry)
    absolute,
    alibi,
    comrope,
    dinov3,
    gta,
    harope,
    irpe,
    lepe,
    lff,
    liere,
    loope,
    peg,
    petr,
    plucker,
    points,
    ppe3d,
    prope,
    rope,
    string,
    video_rope,
)
from vispe.encodings.base import ATTENTION_HOOKS, HOOK_TABLE, HOOKS, Encoding, Hook
from vispe.encodings.build import build_encoding, encoding_class, list_encodings, normalize_spec, parse_encoding_spec
from vispe.encodings.stack import EncodingStack

__all__ = [
    'ATTENTION_HOOKS',
    'HOOKS',
    'HOOK_TABLE',
    'Encoding',
    'EncodingStack',
    'Hook',
    'build_encoding',
    'encoding_class',
    'list_encodings',
    'normalize_spec',
    'parse_encoding_spec',
]
