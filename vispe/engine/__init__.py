"""Runner parts: metrics, safe checkpoint loading, config checks, CPU distributed training, CPU bf16 autocast."""

from vispe.engine.amp import BF16OptimWrapper
from vispe.engine.checkpoint import allow_mmengine_checkpoints, load_checkpoint
from vispe.engine.distributed import CPUDistributedDataParallel
from vispe.engine.metrics import Accuracy

__all__ = [
    'Accuracy',
    'BF16OptimWrapper',
    'CPUDistributedDataParallel',
    'allow_mmengine_checkpoints',
    'load_checkpoint',
]
