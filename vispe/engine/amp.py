"""bf16 mixed precision where mmengine's AmpOptimWrapper cannot go: on CPU.

``--amp`` (``vispe.engine.config.enable_amp``) picks mmengine's ``AmpOptimWrapper`` with ``dtype='bfloat16'`` on a
GPU. That wrapper refuses to build without an accelerator, and the GradScaler it carries exists for float16's narrow
exponent range, which bfloat16 does not have. ``BF16OptimWrapper`` is the CPU counterpart: the plain
``OptimWrapper`` (no loss scaling) whose ``optim_context`` also enters bf16 autocast on the model's device, so the
same config and the same encodings' float32 islands (angles, frequencies, matrix exponentials) run on CPU too.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from mmengine.optim import OptimWrapper
from mmengine.runner.amp import autocast
from torch import nn

from vispe.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class BF16OptimWrapper(OptimWrapper):
    """``OptimWrapper`` that runs the forward under ``torch.autocast(dtype=torch.bfloat16)`` on the model's device.

    No loss scaler: bfloat16 keeps float32's exponent range, so gradients do not underflow the way float16's do.

    Args:
        optimizer: the optimizer (a config's ``optimizer=dict(...)``, which the optimizer wrapper constructor builds).
        accumulative_counts: iterations whose gradients are accumulated before each update (mmengine's
            ``OptimWrapper``).
        clip_grad: gradient clipping, as mmengine's ``OptimWrapper``: e.g. ``dict(max_norm=1.0)`` (``clip_grad_norm_``)
            or ``dict(type='value', clip_value=...)``; None: none.
    """

    cast_dtype = torch.bfloat16

    @contextmanager
    def optim_context(self, model: nn.Module):
        param = next(model.parameters(), None)
        device_type = 'cpu' if param is None else param.device.type
        with super().optim_context(model), autocast(device_type=device_type, dtype=self.cast_dtype):
            yield


__all__ = ['BF16OptimWrapper']
