"""Backbones that take vispe encodings: ``base`` (the shared forward protocol), ``common`` (checks), the backbones
(``vit``, ``dit``, ``point``, ``multiview``, ``video``), ``mixed_sizes`` and ``timm_interop``."""

from vispe.backbones.base import PEBlock, build_backbone_encodings
from vispe.backbones.dit import DIT_SIZES, DiT, dit
from vispe.backbones.multiview import MultiViewTransformer
from vispe.backbones.point import PointTransformer
from vispe.backbones.timm_interop import create_model, register_timm_names
from vispe.backbones.video import VideoTransformer
from vispe.backbones.vit import VisionTransformerPE, apply_encoding

__all__ = [
    'DIT_SIZES',
    'DiT',
    'MultiViewTransformer',
    'PEBlock',
    'PointTransformer',
    'VideoTransformer',
    'VisionTransformerPE',
    'apply_encoding',
    'build_backbone_encodings',
    'create_model',
    'dit',
    'register_timm_names',
]
