"""Backbones that take vispe encodings."""

from vispe.backbones.vit import PEBlock, VisionTransformerPE, apply_encoding, create_model, register_timm_names

__all__ = ['PEBlock', 'VisionTransformerPE', 'apply_encoding', 'create_model', 'register_timm_names']
