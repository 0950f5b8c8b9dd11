"""vispe: positional encodings for vision and 3D transformers, on timm, PyTorch and mmengine."""

from vispe.attention import Attention
from vispe.backbones import VisionTransformerPE, apply_encoding, create_model, register_timm_names
from vispe.encodings import Encoding, build_encoding, list_encodings
from vispe.engine.checkpoint import allow_mmengine_checkpoints, load_checkpoint
from vispe.positions import Positions, grid_positions

__version__ = '0.1.0'

allow_mmengine_checkpoints()  # mmengine's resume then works with torch.load(weights_only=True)

#: timm names that importing vispe added (e.g. 'vit_tiny_patch16_ape_sincos_224')
TIMM_NAMES = register_timm_names(list_encodings(ndim=2))

__all__ = [
    'Attention',
    'Encoding',
    'Positions',
    'TIMM_NAMES',
    'VisionTransformerPE',
    'apply_encoding',
    'build_encoding',
    'create_model',
    'grid_positions',
    'list_encodings',
    'load_checkpoint',
]
