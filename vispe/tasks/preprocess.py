"""Batch-level data preprocessors for mmengine models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from mmengine.model import BaseDataPreprocessor

from vispe.registry import MODELS


@MODELS.register_module()
class MultiScaleDataPreprocessor(BaseDataPreprocessor):
    """Multi-scale training: each training batch is resized to one size drawn from ``sizes``.

    Args:
        sizes: square sizes in pixels, drawn uniformly (global torch RNG) once per batch; every size must be divisible
            by the model's patch size.
        non_blocking: copy the batch to the device asynchronously (mmengine's ``BaseDataPreprocessor``).

    mmengine's default preprocessor runs first (casts the batch, moves it to the device); then, in training only,
    ``inputs`` (B, C, H, W) are resized with antialiased bilinear interpolation. Validation and test batches are
    left at their data set's size. One size per batch keeps batches rectangular; in distributed training each
    rank draws its own.

    It resizes stacked batches only: a batch of mixed sizes (``inputs`` a list, from ``mixed_size_collate``) is
    refused in training, since resizing it to one size would undo the mix; mixed-resolution data sets draw their
    sizes themselves (``size_policy``, ``vispe.datasets.sizes``).
    """

    def __init__(self, sizes: Sequence[int], non_blocking: bool = False) -> None:
        super().__init__(non_blocking=non_blocking)
        if not sizes or any(int(s) <= 0 for s in sizes):
            raise ValueError(f'sizes must be positive pixel sizes, e.g. (32, 48, 64); got {sizes!r}')
        self.sizes = tuple(int(s) for s in sizes)

    def forward(self, data: dict | Any, training: bool = False) -> dict | Any:
        data = super().forward(data, training)
        if not training:
            return data
        size = self.sizes[int(torch.randint(len(self.sizes), ()))]
        images = data['inputs']  # (B, C, H, W)
        if not isinstance(images, torch.Tensor):
            raise TypeError(
                f'MultiScaleDataPreprocessor resizes a stacked (B, C, H, W) batch, got inputs of type '
                f'{type(images).__name__} (a mixed-size batch from mixed_size_collate?); a data set with a '
                'size_policy already draws the sizes: drop model.data_preprocessor or the size_policy'
            )
        if images.shape[-2:] != (size, size):
            images = F.interpolate(images, size=(size, size), mode='bilinear', align_corners=False, antialias=True)
        return {**data, 'inputs': images}
