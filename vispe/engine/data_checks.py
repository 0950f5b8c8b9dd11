"""Checks of a run's data against its model when the run starts (``ClassCountHook``, ``before_run``): a classifier's
output count against its data set's class count, and the class names of the train and val / test data sets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from vispe.engine.config import ConfigError
from vispe.engine.run_meta import dataset_chain
from vispe.registry import HOOKS

SPLITS = ('train', 'val', 'test')


class ClassCountError(ConfigError):
    """A classifier's output count does not match its data set's classes."""


def dataset_classes(dataset: Any) -> tuple[int | None, tuple[str, ...] | None]:
    """(class count, class names) from the ``metainfo`` of ``dataset`` or what it wraps; (None, None) if none says."""
    for inner in dataset_chain(dataset, depth=4):
        meta = getattr(inner, 'metainfo', None) or {}
        names = meta.get('classes')
        count = meta.get('num_classes', len(names) if names is not None else None)
        if count is not None:
            return int(count), tuple(names) if names is not None else None
    return None, None


def model_outputs(model: Any) -> int | None:
    """The logits a classifier gives, by its own ``class_count()``; None for models that do not say."""
    model = model.module if is_model_wrapper(model) else model
    count = getattr(model, 'class_count', None)
    return count() if callable(count) else None


def _first_difference(a: Sequence[str], b: Sequence[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f'class {i} is {x!r} in one and {y!r} in the other'
    return f'one has {len(a)} classes, the other {len(b)}'


def _describe(dataset: Any) -> str:
    root = getattr(dataset, 'data_root', None)
    return type(dataset).__name__ + (f' at {root}' if root else '')


@HOOKS.register_module()
class ClassCountHook(Hook):
    """Refuses a run whose classifier's output count differs from its data sets' class count, or whose val / test data
    set names other classes (or another order) than the train one.

    Data sets that do not say their classes and models that are not vispe classifiers are not checked.

    Args:
        allow_extra_outputs: accept more outputs than classes (never fewer) in training; evaluation runs never do.
    """

    priority = 'VERY_HIGH'

    def __init__(self, allow_extra_outputs: bool = False) -> None:
        self.allow_extra_outputs = allow_extra_outputs

    def before_run(self, runner) -> None:
        outputs = model_outputs(runner.model)
        found = []
        for split in SPLITS:
            loop = getattr(runner, f'_{split}_loop', None)  # only loops this run has built; never build one here
            dataset = getattr(getattr(loop, 'dataloader', None), 'dataset', None)
            count, names = dataset_classes(dataset)
            if count is not None:
                found.append((split, dataset, count, names))
        if outputs is not None:
            evaluating = not any(split == 'train' for split, *_ in found)
            for split, dataset, count, _ in found:
                self._check_count(runner.model, outputs, split, dataset, count, evaluating)
        for (split_a, _, _, names_a), (split_b, _, _, names_b) in zip(found, found[1:]):
            if names_a is not None and names_b is not None and tuple(names_a) != tuple(names_b):
                raise ClassCountError(
                    f'the {split_b} data set has other classes than the {split_a} data set '
                    f'({_first_difference(names_a, names_b)}): label indices would mean different classes; give every '
                    'split the same classes (for ImageFolder trees: the same class folders)'
                )

    def _check_count(
        self, model: Any, outputs: int, split: str, dataset: Any, count: int, evaluating: bool = False
    ) -> None:
        if outputs == count or (outputs > count and self.allow_extra_outputs and not evaluating):
            return
        model = model.module if is_model_wrapper(model) else model
        what = f'{type(model).__name__} has {outputs} outputs but the {split} data set ({_describe(dataset)}) has '
        fix = f'set model.backbone.num_classes={count}'
        if evaluating:  # a trained model: its outputs are fixed, and the data's labels must mean its classes
            own = 'evaluate it on data of the classes it was trained on'
            if outputs < count:
                raise ClassCountError(f'{what}{count} classes: labels {outputs}..{count - 1} are classes it never '
                                      f'learned; {own}')  # fmt: skip
            raise ClassCountError(
                f'{what}{count} classes, numbered among themselves: a label need not mean the class the model gives '
                f"that number; {own}, or give the data set the model's class names in its order "
                f'({split}_dataloader.dataset.classes=[...]; vispe test and the sweeps take them from a checkpoint '
                'that records them)'
            )
        if outputs < count:
            raise ClassCountError(f'{what}{count} classes: labels {outputs}..{count - 1} have no output; {fix}')
        raise ClassCountError(
            f'{what}only {count} classes: the {outputs - count} extra outputs are classes the data never shows, which '
            f'still take probability and can be predicted (usually num_classes left from another config); {fix}, or '
            'default_hooks.class_count=dict(type="ClassCountHook", allow_extra_outputs=True) if you mean it'
        )


__all__ = ['ClassCountError', 'ClassCountHook', 'dataset_classes', 'model_outputs']
