"""Runner parts: vispe's Runner, metrics, safe checkpoints and atomic saves, hooks, config and data checks, CPU
distributed training and bf16 autocast, optimizer parameter groups."""

from vispe.engine.amp import BF16OptimWrapper
from vispe.engine.checkpoint import allow_mmengine_checkpoints, latest_checkpoint, load_checkpoint
from vispe.engine.data_checks import ClassCountError, ClassCountHook
from vispe.engine.distributed import CPUDistributedDataParallel
from vispe.engine.hooks import (
    AtomicCheckpointHook,
    NonFiniteLossError,
    NonFiniteLossHook,
    RNGStateHook,
    SkippedSamplesHook,
)
from vispe.engine.metrics import Accuracy
from vispe.engine.optim import ParamGroupsOptimWrapperConstructor
from vispe.engine.run_meta import RunMetaHook
from vispe.engine.runner import VispeRunner
from vispe.engine.workdir import WorkDirError, WorkDirLock

__all__ = [
    'Accuracy',
    'AtomicCheckpointHook',
    'BF16OptimWrapper',
    'CPUDistributedDataParallel',
    'ClassCountError',
    'ClassCountHook',
    'NonFiniteLossError',
    'NonFiniteLossHook',
    'ParamGroupsOptimWrapperConstructor',
    'RNGStateHook',
    'RunMetaHook',
    'SkippedSamplesHook',
    'VispeRunner',
    'WorkDirError',
    'WorkDirLock',
    'allow_mmengine_checkpoints',
    'latest_checkpoint',
    'load_checkpoint',
]
