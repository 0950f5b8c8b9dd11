"""bf16 mixed precision on CPU, where mmengine's AmpOptimWrapper refuses to build; ``--amp`` picks it there
(``enable_amp``)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from mmengine.optim import OptimWrapper
from mmengine.runner.amp import autocast
from torch import nn

from vispe.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class BF16OptimWrapper(OptimWrapper):
    """``OptimWrapper`` that runs the forward under bf16 autocast on the model's device, without loss scaling (bfloat16
    keeps float32's exponent range).

    Args:
        optimizer: the optimizer.
        accumulative_counts: iterations whose gradients are accumulated before each update.
        clip_grad: gradient clipping as mmengine's ``OptimWrapper`` takes it; None: none.
    """

    cast_dtype = torch.bfloat16

    @contextmanager
    def optim_context(self, model: nn.Module):
        param = next(model.parameters(), None)
        device_type = 'cpu' if param is None else param.device.type
        with super().optim_context(model), autocast(device_type=device_type, dtype=self.cast_dtype):
            yield


__all__ = ['BF16OptimWrapper']
