"""Distributed training on CPU (gloo): vispe starts the process group itself and wraps the model with
``CPUDistributedDataParallel``, where mmengine's launcher would need a GPU. On GPU nothing changes."""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel

from vispe.registry import MODEL_WRAPPERS


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's DDP wrapper for CPU modules, which DDP requires to get ``device_ids=None``.

    Args:
        module: the model to wrap.
        device_ids: ignored; DDP always gets None.
        **kwargs: passed to mmengine's ``MMDistributedDataParallel``.
    """

    def __init__(self, module, device_ids=None, **kwargs):
        super().__init__(module=module, device_ids=None, **kwargs)


def setup_cpu_distributed(cfg) -> None:
    """With a launcher and no GPU: init the gloo process group and pick the CPU DDP wrapper."""
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return
    if not dist.is_initialized():
        backend = cfg.get('env_cfg', {}).get('dist_cfg', {}).get('backend', 'gloo')
        dist.init_process_group(backend=backend)
    if cfg.get('model_wrapper_cfg') is None:
        # scoped key: mmengine's wrap_model looks the type up in its root registry
        cfg.model_wrapper_cfg = dict(type='vispe.CPUDistributedDataParallel', broadcast_buffers=False)


def teardown_distributed() -> None:
    """Leave the process group cleanly; call it once nothing refers to the Runner.

    It collects garbage first, so DDP's reducer does not outlive the process group (a rank then aborts at exit).
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
