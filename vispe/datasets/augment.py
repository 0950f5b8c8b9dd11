"""The image pipeline of vispe's file-backed data sets: timm's ``create_transform``, sized by a size policy.

Training takes ``augment=dict(...)`` as ``create_transform``'s keys; vispe's defaults keep at least half of the image
and add no colour jitter. Evaluation covers and centre-crops (``resize='crop'``), or pads or stretches. With a size
policy the crop is resized to the drawn size (aspect-keeping policies: ``ratio`` relative to the image's)."""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch
from PIL import Image
from timm.data import create_transform
from timm.data.transforms import MaybeToTensor, RandomResizedCropAndInterpolation, str_to_interp_mode
from torchvision import transforms
from torchvision.transforms import functional as TF

from vispe.datasets.sizes import HW, SizePolicy
from vispe.registry import closest

#: how evaluation meets a size of another aspect ratio (``resize``), as timm's eval ``crop_mode``: 'crop' covers the
#: size and cuts the centre out (the borders lost), 'pad' fits inside and pads with the mean colour (nothing lost),
#: 'stretch' scales each side to the size (the aspect ratio lost: timm's 'squash')
RESIZE_MODES = {'crop': 'center', 'pad': 'border', 'stretch': 'squash'}


def check_resize(resize: str) -> str:
    if resize not in RESIZE_MODES:
        raise ValueError(f'resize must be one of {list(RESIZE_MODES)}, got {resize!r}')
    return resize


def resize_steps(size: int | Sequence[int], resize: str, mean: Sequence[float], interpolation: str = 'bilinear'):
    """The eval resize to ``size`` under ``resize`` as transforms, for pipelines outside timm's."""
    from timm.data.transforms import CenterCropOrPad, ResizeKeepRatio

    hw = [size, size] if isinstance(size, int) else [int(size[0]), int(size[1])]
    if check_resize(resize) == 'stretch':
        return [transforms.Resize(hw, interpolation=str_to_interp_mode(interpolation), antialias=True)]
    fill = (round(255 * mean[0]), round(255 * mean[1 % len(mean)]), round(255 * mean[2 % len(mean)]))
    longest = 1.0 if resize == 'pad' else 0.0
    return [ResizeKeepRatio(hw, longest=longest, interpolation=interpolation), CenterCropOrPad(hw, fill=fill)]


#: vispe's training defaults for ``create_transform`` (see the module docstring for why they differ from timm's)
AUGMENT_DEFAULTS: dict[str, Any] = dict(
    scale=(0.5, 1.0),
    ratio=(3.0 / 4.0, 4.0 / 3.0),
    hflip=0.5,
    vflip=0.0,
    color_jitter=None,
    auto_augment=None,
    re_prob=0.0,
)
#: the ``create_transform`` training arguments a config may set in ``augment=dict(...)``
AUGMENT_KEYS = (
    'scale',
    'ratio',
    'hflip',
    'vflip',
    'color_jitter',
    'color_jitter_prob',
    'grayscale_prob',
    'gaussian_blur_prob',
    'auto_augment',
    're_prob',
    're_mode',
    're_count',
)


def augment_settings(augment: bool | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``create_transform`` training arguments ``augment`` asks for (defaults updated by a dict; None for False /
    None); unknown keys are refused."""
    if augment is None or augment is False:
        return None
    if augment is True:
        return dict(AUGMENT_DEFAULTS)
    if not isinstance(augment, Mapping):
        raise TypeError(f'augment must be True, False or a dict of create_transform arguments, got {augment!r}')
    unknown = [key for key in augment if key not in AUGMENT_KEYS]
    if unknown:
        hints = '; '.join(f'{key!r}{closest(key, AUGMENT_KEYS)}' for key in unknown)
        raise ValueError(
            f'augment got unknown key(s) {hints} (valid keys: {", ".join(AUGMENT_KEYS)}; the interpolation and the '
            "crop size are the data set's own arguments: interpolation, image_size, size_policy)"
        )
    settings = {**AUGMENT_DEFAULTS, **augment}
    for key in ('scale', 'ratio'):
        if settings[key] is not None:
            settings[key] = tuple(float(v) for v in settings[key])
    return settings


def _final(mean: Sequence[float], std: Sequence[float]) -> transforms.Compose:
    return transforms.Compose([MaybeToTensor(), transforms.Normalize(mean=torch.tensor(mean), std=torch.tensor(std))])


class ImageTransform:
    """PIL image (or float image tensor) -> normalised float tensor (C, H, W), through timm's transforms; tensor images
    (16- and 32-bit sources) skip timm's PIL-only stages (RandAugment, colour jitter), with a warning.

    Args:
        image_size: the crop without a size policy: int (square) or (H, W).
        augment: ``create_transform`` training arguments, or None for the eval transform.
        mean: per-channel normalisation.
        std: per-channel normalisation.
        size_policy: draws the output size per call (``__call__(image, draw)``); None: ``image_size``.
        interpolation: as timm takes it ('random' in training only).
    """

    def __init__(
        self,
        image_size: int | Sequence[int],
        augment: Mapping[str, Any] | None,
        mean: Sequence[float],
        std: Sequence[float],
        size_policy: SizePolicy | None = None,
        interpolation: str = 'bilinear',
        resize: str = 'crop',
    ) -> None:
        self.resize = check_resize(resize)
        self.image_size = image_size if isinstance(image_size, int) else (int(image_size[0]), int(image_size[1]))
        self.augment, self.size_policy, self.interpolation = augment, size_policy, interpolation
        # evaluation is deterministic: a random choice of interpolation is for training only
        self.eval_interpolation = 'bilinear' if interpolation == 'random' else interpolation
        self.mean, self.std = tuple(mean), tuple(std)
        self._warned_tensor = False
        self._eval_sizes: dict[HW, transforms.Compose] = {}
        if augment is None:
            self.eval_transform = self._eval_at(self.image_size)
            self.final = _final(self.mean, self.std)
            return
        side = self.image_size if isinstance(self.image_size, int) else min(self.image_size)
        if size_policy is not None:
            side = size_policy.nominal_side()  # RandAugment's shifts are a fraction of a side
        primary, self.secondary, self.final = create_transform(
            self.image_size if size_policy is None else side,
            is_training=True,
            separate=True,
            interpolation=interpolation,
            mean=self.mean,
            std=self.std,
            **dict(augment),
        )
        self.crop: RandomResizedCropAndInterpolation = primary.transforms[0]
        self.flips = transforms.Compose(primary.transforms[1:])
        self.primary = primary

    @property
    def stages(self) -> list[Any]:
        """Every transform this pipeline may apply, in order (for inspection and tests)."""
        if self.augment is None:
            return list(self.eval_transform.transforms)
        return [*self.primary.transforms, *self.secondary.transforms, *self.final.transforms]

    def _eval_at(self, size: int | HW) -> transforms.Compose:
        # timm's eval transform, its crop mode from ``resize`` (RESIZE_MODES: centre crop by default)
        mode = RESIZE_MODES[self.resize]
        size = size if isinstance(size, int) or size[0] != size[1] else size[0]
        return create_transform(
            size, is_training=False, crop_pct=1.0, crop_mode=mode, interpolation=self.eval_interpolation,
            mean=self.mean, std=self.std,
        )  # fmt: skip

    def _eval_cached(self, size: HW) -> transforms.Compose:
        if size not in self._eval_sizes:
            self._eval_sizes[size] = self._eval_at(size)
        return self._eval_sizes[size]

    def __call__(self, image: Image.Image | torch.Tensor, draw: Hashable | None = None) -> torch.Tensor:
        policy = self.size_policy
        if self.augment is None:
            if policy is None:
                return self.eval_transform(image)
            size = policy.size(draw, _hw(image))
            if not policy.keeps_aspect:
                return self._eval_cached(size)(image)
            mode = str_to_interp_mode(self.eval_interpolation)
            resized = TF.resize(image, list(size), interpolation=mode, antialias=True)
            return self.final(resized)
        image = self._crop(image, draw)
        image = self.flips(image)
        if isinstance(image, Image.Image):
            image = self.secondary(image)
        elif self.secondary.transforms and not self._warned_tensor:
            self._warned_tensor = True
            names = ', '.join(type(t).__name__ for t in self.secondary.transforms)
            warnings.warn(f'16-bit / float images skip the PIL-only augmentations ({names})', stacklevel=2)
        return self.final(image)

    def _crop(self, image: Image.Image | torch.Tensor, draw: Hashable | None) -> Image.Image | torch.Tensor:
        policy = self.size_policy
        if policy is None:
            return self.crop(image)
        ratio = self.crop.ratio
        if policy.keeps_aspect:  # NaFlex: the ratio range is relative to the image's aspect ratio
            height, width = _hw(image)
            ratio = (ratio[0] * width / height, ratio[1] * width / height)
        top, left, crop_h, crop_w = self.crop.get_params(image, self.crop.scale, ratio)
        size = policy.size(draw, (crop_h, crop_w))
        interpolation = self.crop.interpolation
        if isinstance(interpolation, (tuple, list)):
            interpolation = interpolation[int(torch.randint(len(interpolation), ()))]
        box = (top, left, crop_h, crop_w)
        return TF.resized_crop(image, *box, list(size), interpolation=interpolation, antialias=True)

    def __repr__(self) -> str:
        kind = 'eval' if self.augment is None else f'train {self.augment}'
        return f'ImageTransform({kind}, image_size={self.image_size}, size_policy={self.size_policy!r})'


def _hw(image: Image.Image | torch.Tensor) -> HW:
    if isinstance(image, Image.Image):
        return image.height, image.width
    return int(image.shape[-2]), int(image.shape[-1])


__all__ = ['AUGMENT_DEFAULTS', 'AUGMENT_KEYS', 'ImageTransform', 'augment_settings']
