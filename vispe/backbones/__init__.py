"""Backbones that take vispe encodings."""

from vispe.backbones.common import PEBlock, build_backbone_encodings
from vispe.backbones.dit import DIT_SIZES, DiT, dit
from vispe.backbones.multiview import MultiViewTransformer
from vispe.backbones.point import PointTransformer
from vispe.backbones.vispe_vit import register_timm_names
from vispe.backbones.vit import VisionTransformerPE, apply_encoding, create_model

__all__ = [
    'DIT_SIZES',
    'DiT',
    'MultiViewTransformer',
    'PEBlock',
    'PointTransformer',
    'VisionTransformerPE',
    'apply_encoding',
    'build_backbone_encodings',
    'create_model',
    'dit',
    'register_timm_names',
]
