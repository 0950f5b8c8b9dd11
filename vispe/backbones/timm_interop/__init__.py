"""timm interop for vispe's ViT, one way (it imports ``vispe.backbones.vit``, never the reverse): ``create``
(``create_model``), ``vispe_vit`` (vispe's timm names), ``names``, ``eva`` (timm's RoPE-ViT and DINOv3 converted) and
``loading`` (weights, configs, feature wrappers)."""

from vispe.backbones.timm_interop.create import create_model
from vispe.backbones.timm_interop.names import default_cfgs
from vispe.backbones.timm_interop.vispe_vit import register_timm_names

__all__ = ['create_model', 'default_cfgs', 'register_timm_names']
