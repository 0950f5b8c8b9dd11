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
    """Multi-scale training: after mmengine's preprocessing, each training batch is resized (antialiased bilinear) to
    one size drawn from ``sizes``; validation and test batches keep their size; a mixed-size list batch is refused.

    Args:
        sizes: square sizes in pixels, divisible by the patch, drawn uniformly once per batch (global RNG).
        non_blocking: copy the batch to the device asynchronously.
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
