"""Image-tensor transforms that report their crop box (``(top, left, height, width)`` fractions, as Shapes2D's), and
``TransformedDataset``, which applies transforms to any vispe data set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch.utils.data import Dataset
from torchvision.transforms import InterpolationMode, RandomResizedCrop
from torchvision.transforms.v2 import functional as TF

from vispe.registry import DATASETS, TRANSFORMS

ImageSize = int | tuple[int, int]


class MapDataset(Protocol):
    """What ``TransformedDataset`` needs of the data set it wraps: a length and dict items by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict: ...


def crop_box(top: int, left: int, height: int, width: int, image_height: int, image_width: int) -> torch.Tensor:
    """A pixel crop as FloatTensor(4) = (top, left, height, width), fractions of the image's height and width."""
    return torch.tensor(
        (top / image_height, left / image_width, height / image_height, width / image_width), dtype=torch.float32
    )


def random_resized_crop(
    image: torch.Tensor,
    size: ImageSize,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    interpolation: InterpolationMode = InterpolationMode.BILINEAR,
    antialias: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crop a random box of ``image`` (C, H, W) as torchvision does, resize it to ``size``; return (image, crop box)."""
    height, width = image.shape[-2:]
    top, left, crop_h, crop_w = RandomResizedCrop.get_params(image, list(scale), list(ratio))
    out_size = [size, size] if isinstance(size, int) else list(size)
    out = TF.resized_crop(image, top, left, crop_h, crop_w, out_size, interpolation=interpolation, antialias=antialias)
    return out, crop_box(top, left, crop_h, crop_w, height, width)


@TRANSFORMS.register_module()
class RandomResizedCropBox:
    """Random resized crop of an image tensor that also reports its box: on a dict item, a new dict with the crop in
    ``key`` and the box in ``'crop'``; on a tensor, (image, crop).

    Args:
        size: output size, int or (H, W).
        scale: (min, max) area of the crop, as a fraction of the image.
        ratio: (min, max) aspect ratio (width / height) of the crop.
        interpolation: the resize's interpolation mode (or its name).
        antialias: antialias when downsizing.
        key: the image's key when called on a dict item.
    """

    def __init__(
        self,
        size: ImageSize,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: str | InterpolationMode = InterpolationMode.BILINEAR,
        antialias: bool = True,
        key: str = 'inputs',
    ) -> None:
        if not 0.0 < scale[0] <= scale[1] <= 1.0 or not 0.0 < ratio[0] <= ratio[1]:
            raise ValueError(f'need 0 < scale[0] <= scale[1] <= 1 and 0 < ratio[0] <= ratio[1], got {scale}, {ratio}')
        if isinstance(size, int):
            self.size: ImageSize = size
        else:
            height, width = size
            self.size = (height, width)
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self.interpolation = InterpolationMode(interpolation)
        self.antialias, self.key = antialias, key

    def __call__(self, data: Any) -> Any:
        image = data[self.key] if isinstance(data, dict) else data
        out, crop = random_resized_crop(image, self.size, self.scale, self.ratio, self.interpolation, self.antialias)
        return {**data, self.key: out, 'crop': crop} if isinstance(data, dict) else (out, crop)

    def __repr__(self) -> str:
        return (
            f'RandomResizedCropBox(size={self.size}, scale={self.scale}, ratio={self.ratio}, '
            f'interpolation={self.interpolation.value!r}, antialias={self.antialias})'
        )


@DATASETS.register_module()
class TransformedDataset(Dataset):
    """Applies transforms to the dict items of another data set, in order; ``metainfo`` is the wrapped data set's.

    Args:
        dataset: the data set whose items are transformed: a built one, or a ``DATASETS`` config.
        transforms: callables or ``TRANSFORMS`` configs, applied in order to each item.
    """

    def __init__(self, dataset: MapDataset | dict, transforms: Sequence[Any]) -> None:
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.transforms = [TRANSFORMS.build(t) if isinstance(t, dict) else t for t in transforms]
        self.metainfo = getattr(self.dataset, 'metainfo', {})

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        item = self.dataset[index]
        for transform in self.transforms:
            item = transform(item)
        return item
