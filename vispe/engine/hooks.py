"""Runner hooks for runs that survive being killed and stop on a diverged loss.

* ``AtomicCheckpointHook``: checkpoints and the ``last_checkpoint`` pointer written atomically; ``kill -9`` at any
  moment leaves the previous ones whole.
* ``RNGStateHook``: the torch, numpy and Python random states saved with each checkpoint and restored on resume
  (single-process runs; distributed ranks keep mmengine's reseeding).
* ``NonFiniteLossHook``: stops at the first NaN / Inf loss, before any hook can save the diverged weights.
* ``SkippedSamplesHook``: reports the unreadable samples that data sets built with ``on_error='skip'`` skipped.
"""

from __future__ import annotations

import math
import os.path as osp
import random
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from mmengine.dist import get_world_size, is_main_process
from mmengine.fileio.backends import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.hooks import checkpoint_hook as _mm_checkpoint_hook

from vispe.engine.atomic import DiskFullError, atomic_open, atomic_write, remove_partial_files
from vispe.engine.checkpoint import latest_checkpoint
from vispe.engine.run_meta import dataset_chain
from vispe.registry import HOOKS


@register_backend('atomic_local', force=True)
class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend with atomic ``put`` / ``put_text`` (``vispe.engine.atomic.atomic_write``)."""

    def put(self, obj: bytes, filepath) -> None:
        try:
            atomic_write(str(filepath), obj)
        except DiskFullError as err:  # name the checkpoint a resume would start from
            last = latest_checkpoint(osp.dirname(str(filepath)))
            where = f'the last complete checkpoint, {last}, is intact' if last else 'no complete checkpoint exists yet'
            advice = 'free some space, then continue with --resume'
            raise DiskFullError(err.errno, f'{err.what}; {where}', advice) from None

    def put_text(self, obj: str, filepath, encoding: str = 'utf-8') -> None:
        atomic_write(str(filepath), obj, encoding)


@contextmanager
def _atomic_pointer_writes():
    """Inside the block, mmengine's checkpoint hook module opens files through ``atomic_open``."""
    _mm_checkpoint_hook.open = atomic_open
    try:
        yield
    finally:
        del _mm_checkpoint_hook.open  # the builtin again


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` whose checkpoints and ``last_checkpoint`` pointer are replaced atomically (local paths only).

    Args:
        *args: passed to mmengine's ``CheckpointHook``.
        backend_args: the file backend checkpoints are written through; None: vispe's atomic local backend.
        **kwargs: passed to mmengine's ``CheckpointHook``.
    """

    def __init__(self, *args, backend_args: dict | None = None, **kwargs) -> None:
        super().__init__(*args, backend_args=backend_args or {'backend': 'atomic_local'}, **kwargs)

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        if self.backend_args.get('backend') == 'atomic_local' and is_main_process():  # the one rank that writes
            remove_partial_files(self.out_dir)
        with _atomic_pointer_writes():
            super()._save_checkpoint_with_step(runner, step, meta)


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Saves the random generators' states with each checkpoint, restores them on resume. Takes no arguments."""

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        state: dict[str, Any] = {
            'torch': torch.get_rng_state(),
            'numpy': np.random.get_state(),
            'python': random.getstate(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state['cuda'] = torch.cuda.get_rng_state_all()
        checkpoint['rng_state'] = state

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        state = checkpoint.get('rng_state')
        if not state or get_world_size() > 1:  # rank 0's states would be copied to every rank: keep mmengine's seeds
            return
        torch.set_rng_state(state['torch'])
        np.random.set_state(tuple(state['numpy']))
        version, internal, gauss = state['python']
        random.setstate((version, tuple(internal), gauss))
        if 'cuda' in state and torch.cuda.is_available() and len(state['cuda']) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state['cuda'])


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or Inf loss."""


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raises ``NonFiniteLossError`` at the first NaN or Inf loss, before any other hook of that iteration (no
    checkpoint of the diverged weights), naming the last good checkpoint. Takes no arguments."""

    priority = 'HIGHEST'

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs: dict | None = None) -> None:
        if not outputs:
            return
        bad = {}
        for key, value in outputs.items():
            if 'loss' not in key:
                continue
            number = float(value.detach().float().mean()) if isinstance(value, torch.Tensor) else float(value)
            if not math.isfinite(number):
                bad[key] = number
        if not bad:
            return
        last = latest_checkpoint(runner.work_dir)
        where = f'iteration {runner.iter + 1} (epoch {runner.epoch + 1}, batch {batch_idx + 1})'
        losses = ', '.join(f'{k} = {v}' for k, v in bad.items())
        keep = (
            f'the last good checkpoint is {last} (left as it was); resume from it with --resume after lowering the '
            'learning rate, adding gradient clipping (optim_wrapper.clip_grad) or checking the data'
            if last
            else 'no checkpoint had been saved yet; lower the learning rate, add gradient clipping '
            '(optim_wrapper.clip_grad) or check the data'
        )
        raise NonFiniteLossError(f'training stopped: {losses} at {where}; {keep}')


def _dataset_with_skips(loader: Any) -> Any:
    """The data set behind a dataloader, through wrappers, that counts skipped samples, or None."""
    chain = dataset_chain(getattr(loader, 'dataset', None), depth=4)
    return next((dataset for dataset in chain if hasattr(type(dataset), 'skipped')), None)


@HOOKS.register_module()
class SkippedSamplesHook(Hook):
    """Logs the unreadable samples an ``on_error='skip'`` data set skipped, after each epoch where they grew and at
    the end. Takes no arguments."""

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self.reported: dict[str, int] = {}

    def _report(self, runner, split: str, final: bool = False) -> None:
        loop = getattr(runner, f'_{split}_loop', None)  # a built loop holds the built loader; never build one here
        dataset = _dataset_with_skips(getattr(loop, 'dataloader', None))
        skipped = dataset.skipped if dataset is not None else {}
        if not skipped or (len(skipped) == self.reported.get(split) and not final):
            return
        self.reported[split] = len(skipped)
        first = next(iter(skipped.values()))
        runner.logger.warning(
            f"{len(skipped)} unreadable {split} sample(s) skipped so far (on_error='skip', counted over all data "
            f'loader workers); first: {first}'
        )

    def after_train_epoch(self, runner) -> None:
        self._report(runner, 'train')

    def after_val_epoch(self, runner, metrics=None) -> None:
        self._report(runner, 'val')

    def after_test_epoch(self, runner, metrics=None) -> None:
        self._report(runner, 'test')

    def after_run(self, runner) -> None:
        for split in ('train', 'val', 'test'):
            self._report(runner, split, final=split in self.reported)


__all__ = [
    'AtomicCheckpointHook',
    'AtomicLocalBackend',
    'NonFiniteLossError',
    'NonFiniteLossHook',
    'RNGStateHook',
    'SkippedSamplesHook',
]
