"""Batches of mixed image sizes: ``SharedSizeBatchSampler`` (one size draw per batch) and ``mixed_size_collate`` (images
of different sizes kept as a list, which the ViT takes)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from mmengine.dataset import default_collate
from torch.utils.data import Sampler

from vispe.datasets.sizes import SizedIndex
from vispe.registry import DATA_SAMPLERS, FUNCTIONS

#: keys are drawn below this (they seed a torch.Generator)
KEY_RANGE = 2**62


@DATA_SAMPLERS.register_module()
class SharedSizeBatchSampler(Sampler[list[SizedIndex]]):
    """Batches of ``sampler``'s indices, each paired with a key shared by its batch, ``[(i, key), ...]``; keys come
    from the global torch RNG, so a seeded run draws the same sizes. A data set without a ``size_policy`` is refused.

    Args:
        sampler: the index sampler.
        batch_size: items per batch.
        drop_last: drop the last batch when it is short.
    """

    def __init__(self, sampler: Sampler | Sequence[int], batch_size: int, drop_last: bool = False) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f'batch_size must be a positive int, got {batch_size!r}')
        dataset = getattr(sampler, 'dataset', None)
        if dataset is not None and not _has_size_policy(dataset):
            raise ValueError(
                f'SharedSizeBatchSampler draws one size per batch for a data set with a size_policy; '
                f'{type(dataset).__name__} has none: set its size_policy (vispe.datasets.sizes) or drop the '
                'batch_sampler'
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[SizedIndex]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(int(index))
            if len(batch) == self.batch_size:
                yield self._keyed(batch)
                batch = []
        if batch and not self.drop_last:
            yield self._keyed(batch)

    @staticmethod
    def _keyed(batch: list[int]) -> list[SizedIndex]:
        key = int(torch.randint(KEY_RANGE, ()))
        return [(index, key) for index in batch]

    def __len__(self) -> int:
        count = len(self.sampler)  # type: ignore[arg-type]
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)


def _has_size_policy(dataset: Any, depth: int = 8) -> bool:
    for _ in range(depth):
        if dataset is None:
            return False
        if getattr(dataset, 'size_policy', None) is not None:
            return True
        dataset = getattr(dataset, 'dataset', None)
    return False


@FUNCTIONS.register_module()
def mixed_size_collate(data_batch: Sequence[dict]) -> dict[str, Any]:
    """mmengine's ``default_collate`` of dict items, except that ``inputs`` of different shapes stay a list.

    Args:
        data_batch: the batch's items, dicts with an ``inputs`` key.
    """
    if not data_batch or not all(isinstance(item, dict) and 'inputs' in item for item in data_batch):
        raise TypeError("mixed_size_collate takes a batch of dict items with an 'inputs' key, like vispe's data sets")
    images = [item['inputs'] for item in data_batch]
    if len({tuple(image.shape) for image in images}) == 1:
        return default_collate(data_batch)
    rest = default_collate([{k: v for k, v in item.items() if k != 'inputs'} for item in data_batch])
    return {'inputs': images, **rest}


__all__ = ['SharedSizeBatchSampler', 'mixed_size_collate']
