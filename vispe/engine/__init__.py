"""Runner parts: metrics, safe checkpoint loading, config checks."""

from vispe.engine.checkpoint import allow_mmengine_checkpoints, load_checkpoint
from vispe.engine.metrics import Accuracy

__all__ = ['Accuracy', 'allow_mmengine_checkpoints', 'load_checkpoint']
