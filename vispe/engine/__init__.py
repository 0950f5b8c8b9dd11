"""Runner parts: metrics, safe checkpoint loading, config checks, CPU distributed training."""

from vispe.engine.checkpoint import allow_mmengine_checkpoints, load_checkpoint
from vispe.engine.distributed import CPUDistributedDataParallel
from vispe.engine.metrics import Accuracy

__all__ = ['Accuracy', 'CPUDistributedDataParallel', 'allow_mmengine_checkpoints', 'load_checkpoint']
