"""What a model was trained on, written into its checkpoints and read back by the evaluation sweeps.

A config's top-level ``train_resolution`` / ``train_points`` is a helper variable of the base data set config; a
run that overrides the data set (``--cfg-options train_dataloader.dataset.image_size=28``) leaves it behind, and a
sweep that trusted it would report a model trained at 28 px as trained at 32. ``RunMetaHook`` records the training
data set's own values in ``checkpoint['meta']``; ``trained_on`` reads them back, falling back for older
checkpoints to the config's training data set, then to the top-level helper.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mmengine.hooks import Hook

from vispe.registry import HOOKS

#: checkpoint meta key -> the training data set's argument it records
META_KEYS = {'train_resolution': 'image_size', 'train_points': 'num_points'}


def _square(value: Any) -> Any:
    """32 for 32, (32, 32) or [32, 32]; (h, w) for a non-square size."""
    if isinstance(value, (list, tuple)):
        value = tuple(int(v) for v in value)
        return value[0] if len(value) == 2 and value[0] == value[1] else value
    return int(value)


def _get(node: Any, name: str) -> Any:
    return node.get(name) if isinstance(node, dict) else getattr(node, name, None)


def dataset_chain(dataset: Any, depth: int = 8) -> Iterator[Any]:
    """``dataset`` and the data sets it wraps, outermost first: each one's ``dataset`` (TransformedDataset,
    mmengine's RepeatDataset), objects or config dicts, at most ``depth`` of them."""
    for _ in range(depth):
        if dataset is None:
            return
        yield dataset
        dataset = dataset.get('dataset') if isinstance(dataset, dict) else getattr(dataset, 'dataset', None)


def dataset_value(dataset: Any, name: str) -> Any | None:
    """``name`` ('image_size' or 'num_points') of a data set object or config, looking through wrappers that hold
    it in ``dataset`` (TransformedDataset, mmengine's RepeatDataset); a crop transform's ``size`` (e.g.
    RandomResizedCropBox) wins for images, since that is what the model sees."""
    for inner in dataset_chain(dataset):
        if name == 'image_size':
            crops = [_get(t, 'size') for t in (_get(inner, 'transforms') or []) if _get(t, 'size') is not None]
            if crops:
                return _square(crops[-1])
        value = _get(inner, name)
        if value is not None:
            return _square(value)
    return None


def trained_on(cfg, meta: dict | None, key: str) -> Any | None:
    """``key`` ('train_resolution' or 'train_points') of a checkpoint: its meta (RunMetaHook), else the config's
    training data set, else the config's top-level ``key``; None when none has it."""
    for value in (
        (meta or {}).get(key),
        dataset_value((cfg.get('train_dataloader') or {}).get('dataset'), META_KEYS[key]),
        cfg.get(key),
    ):
        if value is not None:
            return _square(value)
    return None


@HOOKS.register_module()
class RunMetaHook(Hook):
    """Writes what the model is trained on into every checkpoint's meta: ``train_resolution`` (the training data
    set's image size, or its crop size) for images, ``train_points`` (its point count) for point clouds."""

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        dataset = self._train_dataset(runner)
        meta = checkpoint.setdefault('meta', {})
        for key, name in META_KEYS.items():
            value = dataset_value(dataset, name)
            if value is not None:
                meta[key] = value

    @staticmethod
    def _train_dataset(runner) -> Any:
        """The built training data set, or its config when the loop has not built it (a save outside training)."""
        loop = getattr(runner, '_train_loop', None)
        loader = getattr(loop, 'dataloader', None) if loop is not None and not isinstance(loop, dict) else None
        if loader is not None and hasattr(loader, 'dataset'):
            return loader.dataset
        return (runner.cfg.get('train_dataloader') or {}).get('dataset')


__all__ = ['META_KEYS', 'RunMetaHook', 'dataset_chain', 'dataset_value', 'trained_on']
