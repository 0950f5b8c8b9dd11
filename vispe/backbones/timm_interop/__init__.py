"""timm interop for vispe's ViT, one way: this package imports ``vispe.backbones.vit`` and is never imported by it.

``create`` (``create_model``: any timm name with a vispe encoding, ``local-dir:`` folders), ``vispe_vit`` (vispe's
own timm names and their registration, ``register_timm_names``; its module name is what
``timm.list_models(module='vispe_vit')`` lists), ``names`` (what is known of a name before building it:
``default_cfgs``, architectures, argument checks), ``eva`` (timm's naver RoPE-ViT and DINOv3 models converted,
state dicts included) and ``loading`` (weight files, pretrained configs, ``features_only`` wrappers).
"""

from vispe.backbones.timm_interop.create import create_model
from vispe.backbones.timm_interop.names import default_cfgs
from vispe.backbones.timm_interop.vispe_vit import register_timm_names

__all__ = ['create_model', 'default_cfgs', 'register_timm_names']
