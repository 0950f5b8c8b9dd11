"""Real image data sets on local files: an ImageFolder tree and CIFAR-10 (python version). Nothing is downloaded:
missing files raise FileNotFoundError naming the expected path."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import Dataset
from torchvision import datasets as tv_datasets
from torchvision.transforms import v2

from vispe.datasets.augment import ImageTransform, augment_settings, check_resize, resize_steps
from vispe.datasets.images import image_size as decoded_size
from vispe.datasets.images import load_image, small_image_message
from vispe.datasets.samples import SkipsBadSamples, WarnsOnce
from vispe.datasets.sizes import SizePolicy, as_pair, build_size_policy, draw_for
from vispe.registry import DATASETS

ImageSize = int | tuple[int, int]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
SPLIT_NAMES = ('train', 'val', 'test')
CIFAR10_FOLDER = 'cifar-10-batches-py'


Normalize = bool | str  # True: the data set's mean / std; 'symmetric': [-1, 1]; False: [0, 1]


def _to_tensor(normalize: Normalize, mean: tuple[float, ...], std: tuple[float, ...], channels: int = 3) -> list:
    """PIL image or tensor -> [0, 1] floats, then ``(x - mean) / std`` (``normalize`` True) or [-1, 1] ('symmetric')."""
    if normalize not in (True, False, 'symmetric'):
        raise ValueError(
            f"normalize must be True (mean / std), 'symmetric' ([-1, 1]) or False ([0, 1]), got {normalize!r}"
        )
    steps = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    if channels == 1:
        mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
    if normalize == 'symmetric':
        steps.append(v2.Normalize((0.5,) * channels, (0.5,) * channels))
    elif normalize:
        steps.append(v2.Normalize(mean, std))
    return steps


def normalization_stats(normalize: Normalize, mean: tuple[float, ...], std: tuple[float, ...], channels: int) -> tuple:
    """(mean, std) per channel of ``normalize`` (see ``_to_tensor``), for timm's transforms."""
    _to_tensor(normalize, mean, std, channels)  # the same check of ``normalize``
    if normalize == 'symmetric':
        return (0.5,) * channels, (0.5,) * channels
    if not normalize:
        return (0.0,) * channels, (1.0,) * channels
    if channels == 1:
        return (sum(mean) / len(mean),), (sum(std) / len(std),)
    return mean, std


def _missing(path: Path, how: str) -> FileNotFoundError:
    return FileNotFoundError(f'{path} not found. {how} vispe never downloads data; see data/README.md.')


class _DictDataset(SkipsBadSamples, Dataset):
    """A torchvision data set whose items are ``dict(inputs=tensor, labels=int)``; bad files raise or are skipped
    (``on_error``)."""

    def __init__(self, base: tv_datasets.VisionDataset, classes: list[str], on_error: str = 'raise') -> None:
        self.base = base
        self.classes = list(classes)
        self.num_classes = len(self.classes)
        self.metainfo = {'classes': tuple(self.classes), 'num_classes': self.num_classes}
        self.track_skips(on_error)

    def __len__(self) -> int:
        return len(self.base)

    def load(self, index: int) -> dict:
        image, label = self.base[index]
        return {'inputs': image, 'labels': int(label)}


def _find_image_root(data_root: Path, split: str) -> Path:
    split_dir = data_root / split
    if split_dir.is_dir():
        return split_dir
    # Only fall back when data_root is not a tree of splits: otherwise 'train' would be taken for a class.
    if data_root.is_dir():
        subdirs = [p.name for p in data_root.iterdir() if p.is_dir()]
        if subdirs and not set(subdirs) & set(SPLIT_NAMES):
            return data_root
    raise _missing(
        split_dir,
        f'Expected an ImageFolder tree: {data_root}/{split}/<class_name>/<image files> '
        f'(or class folders directly under {data_root}).',
    )


def _empty_class_folders(root: Path) -> list[Path]:
    extensions = tv_datasets.folder.IMG_EXTENSIONS
    empty = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = (name for _, _, names in os.walk(folder, followlinks=True) for name in names)
        if not any(name.lower().endswith(extensions) for name in files):
            empty.append(folder)
    return empty


def _image_folder(root: Path, loader) -> tv_datasets.ImageFolder:
    """torchvision's ImageFolder over ``root``; an empty class folder is an error naming its path."""
    try:
        return tv_datasets.ImageFolder(str(root), loader=loader)
    except FileNotFoundError:
        empty = _empty_class_folders(root) if root.is_dir() else []
        if not empty:
            raise
        raise FileNotFoundError(
            f'class folder(s) without images: {", ".join(map(str, empty))} (image files: '
            f'{", ".join(tv_datasets.folder.IMG_EXTENSIONS)}); every class folder is a class: add images to it or '
            'remove the folder'
        ) from None


def _label_by_name(base: tv_datasets.ImageFolder, root: Path, classes: list[str]) -> None:
    """Relabel ``base`` (torchvision numbers its sorted class folders) so that label i is ``classes[i]``."""
    unknown = [name for name in base.classes if name not in classes]
    if unknown:
        raise ValueError(
            f"class folder(s) {', '.join(map(repr, unknown))} under {root} are not among the model's classes "
            f'{list(classes)}: its labels would mean other classes; name the folders as the training data did '
            "(a renamed or another data set's folder), or evaluate a model trained on these classes"
        )
    index = {name: i for i, name in enumerate(classes)}
    relabel = [index[name] for name in base.classes]
    base.samples = [(path, relabel[label]) for path, label in base.samples]
    base.imgs, base.targets = base.samples, [label for _, label in base.samples]
    base.classes, base.class_to_idx = list(classes), index


@DATASETS.register_module()
class ImageFolderDataset(_DictDataset):
    """Images in ``data_root/split/<class>/*`` (or ``data_root/<class>/*``), via torchvision's ImageFolder, read by
    ``vispe.datasets.images.load_image``; a tiny one is used with a ``SampleWarning``.

    Args:
        data_root: root of the tree.
        split: sub-folder to read; augmentation only for 'train'.
        image_size: int (square crop) or (H, W).
        normalize: True: ImageNet mean / std; 'symmetric': [-1, 1]; False: [0, 1].
        augment: timm's training augmentation (``vispe.datasets.augment``): True for vispe's defaults, a dict of
            ``create_transform`` arguments over them, False for the eval transform; default: ``split == 'train'``.
        on_error: 'raise' (a bad image stops with its name) or 'skip' (warn, serve the next, count it).
        channels: 3 (RGB) or 1 (grey).
        max_image_pixels: larger images are refused as possible decompression bombs; None: Pillow's limit.
        size_policy: draw each item's size (``vispe.datasets.sizes``) instead of ``image_size``.
        interpolation: the resize's, as timm names it ('random' in training only).
        resize: how evaluation meets ``image_size`` at another aspect ratio: 'crop', 'pad' or 'stretch'.
        classes: the class names in label order; None: the sorted class folders. A folder not among them is refused.
    """

    base: tv_datasets.ImageFolder

    def __init__(
        self,
        data_root: str | Path,
        split: str = 'train',
        image_size: ImageSize = 224,
        normalize: Normalize = True,
        augment: bool | dict | None = None,
        on_error: str = 'raise',
        channels: int = 3,
        max_image_pixels: int | None = None,
        size_policy: SizePolicy | dict | None = None,
        interpolation: str = 'bilinear',
        resize: str = 'crop',
        classes: Sequence[str] | None = None,
    ) -> None:
        if channels not in (1, 3):
            raise ValueError(f'channels must be 1 (grey) or 3 (RGB), got {channels!r}')
        if max_image_pixels is not None and max_image_pixels < 1:
            raise ValueError(f'max_image_pixels must be a positive pixel count or None, got {max_image_pixels!r}')
        self.data_root, self.split, self.image_size = Path(data_root), split, image_size
        root = _find_image_root(self.data_root, split)
        self.size_policy = build_size_policy(size_policy)
        settings = augment_settings(split == 'train' if augment is None else augment)
        mean, std = normalization_stats(normalize, IMAGENET_MEAN, IMAGENET_STD, channels)
        self.transform = ImageTransform(image_size, settings, mean, std, self.size_policy, interpolation, resize)
        self.loader = functools.partial(load_image, channels=channels, max_pixels=max_image_pixels)
        self.crop = as_pair(image_size, 'image_size')
        base = _image_folder(root, self.loader)
        if classes is not None:
            _label_by_name(base, root, list(classes))
        super().__init__(base, base.classes, on_error)
        self.warn_once = WarnsOnce(len(self))

    def load(self, index: int, key: int | None = None) -> dict:
        path, label = self.base.samples[index]
        image = self.loader(path)
        hw = decoded_size(image)
        draw = None if self.size_policy is None else draw_for(self.size_policy, key)
        crop = self.crop if self.size_policy is None else self.size_policy.size(draw, hw)
        self.warn_once(index, small_image_message(path, hw, crop))
        return {'inputs': self.transform(image, draw), 'labels': int(label)}


@DATASETS.register_module()
class CIFAR10Dataset(_DictDataset):
    """CIFAR-10 from the python-version batches in ``data_root/cifar-10-batches-py`` (never downloaded).

    Args:
        data_root: folder that contains ``cifar-10-batches-py``.
        split: 'train' (50k images) or 'val' / 'test' (both the 10k test batch).
        image_size: images are resized when this differs from 32.
        normalize: True: CIFAR-10 mean / std; 'symmetric': [-1, 1]; False: [0, 1].
        augment: 4-pixel padded random crop + flip; default: ``split == 'train'``.
        resize: how a 32x32 image meets an ``image_size`` of another aspect ratio: 'crop', 'pad' or 'stretch'.
    """

    def __init__(
        self,
        data_root: str | Path = 'data/cifar10',
        split: str = 'train',
        image_size: ImageSize = 32,
        normalize: Normalize = True,
        augment: bool | None = None,
        resize: str = 'crop',
    ) -> None:
        if split not in SPLIT_NAMES:
            raise ValueError(f'unknown split {split!r}; valid splits: {list(SPLIT_NAMES)}')
        check_resize(resize)
        self.data_root, self.split, self.image_size = Path(data_root), split, image_size
        batches = self.data_root / CIFAR10_FOLDER
        how = (
            f'Expected the CIFAR-10 python version (data_batch_1..5, test_batch, batches.meta) in {batches}: '
            f'download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and extract it '
            f'into {self.data_root}.'
        )
        if not batches.is_dir():
            raise _missing(batches, how)
        augment = split == 'train' if augment is None else augment
        steps = [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()] if augment else []
        if image_size not in (32, (32, 32), [32, 32]):
            steps += resize_steps(image_size, resize, CIFAR10_MEAN)
        transform = v2.Compose(steps + _to_tensor(normalize, CIFAR10_MEAN, CIFAR10_STD))
        try:
            base = tv_datasets.CIFAR10(str(self.data_root), train=split == 'train', transform=transform, download=False)
        except RuntimeError as err:  # torchvision's "Dataset not found or corrupted"
            raise _missing(batches, how + ' (a file is missing or corrupted)') from err
        super().__init__(base, base.classes)
