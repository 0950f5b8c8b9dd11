"""Batches of mixed image sizes: a batch sampler whose batches share one size draw, and a collate that keeps
images of different sizes as a list.

``SharedSizeBatchSampler`` (in mmengine's DATA_SAMPLERS through vispe's) groups the indices of any sampler into
batches like torch's ``BatchSampler`` and pairs each index with its batch's key, ``(index, key)``. A data set with a
``size_policy`` (``vispe.datasets.sizes``) draws its size from that key, so a batch has one draw: one square side
(``SquareSizes``: the batch stacks), or one token budget that each image fills at its own aspect ratio
(``NativeAspect``). Without the sampler the same data set draws once per item::

    train_dataloader = dict(
        batch_size=32,
        sampler=dict(type='DefaultSampler', shuffle=True),
        batch_sampler=dict(type='SharedSizeBatchSampler'),   # leave out: one draw per image
        collate_fn=dict(type='vispe.mixed_size_collate'),
        dataset=dict(type='Shapes2D', size_policy=dict(type='SquareSizes', min_size=16, max_size=64, patch_size=4)),
    )

``mixed_size_collate`` (in vispe's FUNCTIONS; a config names it ``'vispe.mixed_size_collate'``, since mmengine looks
collate functions up in its root registry, which finds vispe's child by its scope) is mmengine's
``default_collate`` when every image of the batch has the same shape; otherwise ``inputs`` is the list of the
(C, H_i, W_i) images and the other keys are collated as usual (``labels`` a (B,) tensor). mmengine's data
preprocessor moves such a list to the device item by item, and ``ImageClassifier`` hands it to the ViT, which takes
a list of images of different sizes.
"""

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
    """Batches of ``sampler``'s indices, each index paired with a key shared by its batch: ``[(i, key), ...]``.

    Args:
        sampler: the index sampler (mmengine's DefaultSampler or InfiniteSampler; the Runner passes the config's).
        batch_size: items per batch (the Runner passes the loader's ``batch_size``).
        drop_last: drop the last batch when it is short.

    Keys come from the global torch RNG, drawn as the batches are made (in the main process, which mmengine seeds
    with the run's seed, so a seeded run draws the same sizes again; each rank of a distributed run draws its own).
    The data set (or the one it wraps, e.g. in a ``TransformedDataset``) must have a ``size_policy``: one without
    would ignore the keys, so it is refused here.
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
    """Whether ``dataset``, or a data set it wraps in ``dataset`` (TransformedDataset), has a size policy."""
    for _ in range(depth):
        if dataset is None:
            return False
        if getattr(dataset, 'size_policy', None) is not None:
            return True
        dataset = getattr(dataset, 'dataset', None)
    return False


@FUNCTIONS.register_module()
def mixed_size_collate(data_batch: Sequence[dict]) -> dict[str, Any]:
    """mmengine's ``default_collate`` of dict items, except that images of different shapes stay a list: ``inputs``
    is then ``[(C, H_i, W_i), ...]`` in batch order, every other key collated as ``default_collate`` does.

    A config names it (``collate_fn=dict(type='mixed_size_collate')``) and sets nothing: the data loader passes the
    batch.

    Args:
        data_batch: the batch's items, dicts with an ``inputs`` key (as vispe's data sets serve them).
    """
    if not data_batch or not all(isinstance(item, dict) and 'inputs' in item for item in data_batch):
        raise TypeError("mixed_size_collate takes a batch of dict items with an 'inputs' key, like vispe's data sets")
    images = [item['inputs'] for item in data_batch]
    if len({tuple(image.shape) for image in images}) == 1:
        return default_collate(data_batch)
    rest = default_collate([{k: v for k, v in item.items() if k != 'inputs'} for item in data_batch])
    return {'inputs': images, **rest}


__all__ = ['SharedSizeBatchSampler', 'mixed_size_collate']
