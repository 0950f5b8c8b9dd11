"""Real image data sets on local files: an ImageFolder tree and CIFAR-10 (python version).

vispe never downloads anything: missing files raise FileNotFoundError naming the expected path and layout
(see data/README.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import datasets as tv_datasets
from torchvision.transforms import v2

from vispe.datasets.samples import SKIP_HINT, SampleError, SkipsBadSamples
from vispe.registry import DATASETS

ImageSize = int | tuple[int, int]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
SPLIT_NAMES = ('train', 'val', 'test')
CIFAR10_FOLDER = 'cifar-10-batches-py'


Normalize = bool | str  # True: the data set's mean / std; 'symmetric': [-1, 1]; False: [0, 1]


def _to_tensor(normalize: Normalize, mean: tuple[float, ...], std: tuple[float, ...]) -> list:
    """PIL image -> float tensor in [0, 1]; then ``(x - mean) / std`` when ``normalize`` is True, or ``(x - 0.5) / 0.5``
    (values in [-1, 1], what Shapes2D gives and diffusion models expect) when it is 'symmetric'."""
    if normalize not in (True, False, 'symmetric'):
        raise ValueError(
            f"normalize must be True (mean / std), 'symmetric' ([-1, 1]) or False ([0, 1]), got {normalize!r}"
        )
    steps = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    if normalize == 'symmetric':
        steps.append(v2.Normalize((0.5,) * 3, (0.5,) * 3))
    elif normalize:
        steps.append(v2.Normalize(mean, std))
    return steps


def _resize_steps(image_size: ImageSize, augment: bool) -> list:
    """Train: RandomResizedCrop + horizontal flip. Eval: resize the short side, centre crop (deterministic)."""
    if augment:
        return [v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()]
    if isinstance(image_size, int):
        return [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    return [v2.Resize(tuple(image_size), antialias=True)]  # an explicit (H, W) is taken as is


def _missing(path: Path, how: str) -> FileNotFoundError:
    """A FileNotFoundError that names the missing path and how to provide the data."""
    return FileNotFoundError(f'{path} not found. {how} vispe never downloads data; see data/README.md.')


class _DictDataset(SkipsBadSamples, Dataset):
    """Wraps a torchvision data set so items are ``dict(inputs=tensor, labels=int)``, like Shapes2D; bad files are
    an error naming them or skipped (``on_error``, ``vispe.datasets.samples``)."""

    def __init__(self, base: Dataset, classes: list[str], on_error: str = 'raise') -> None:
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


def load_image(path: str) -> Image.Image:
    """An RGB PIL image, decoded in full now (PIL decodes lazily, so a truncated file would fail later, far from
    its name); SampleError naming the file when it is corrupt, truncated or not an image."""
    try:
        with Image.open(path) as image:
            return image.convert('RGB')
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:  # PIL's ways of saying so
        raise SampleError(f'{path}: unreadable image ({err}); {SKIP_HINT}') from None


def _find_image_root(data_root: Path, split: str) -> Path:
    """``data_root/split`` if it exists, else ``data_root`` itself when it directly holds class folders."""
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


@DATASETS.register_module()
class ImageFolderDataset(_DictDataset):
    """Images in ``data_root/split/<class>/*`` (or ``data_root/<class>/*``), via torchvision's ImageFolder.

    Args:
        data_root: root of the tree.
        split: sub-folder to read; also picks the transform (random crops and flips only for 'train').
        image_size: int (square crop) or (H, W).
        normalize: True: ImageNet mean / std; 'symmetric': values in [-1, 1] (for diffusion); False: [0, 1].
        augment: random crop + flip; default: ``split == 'train'``.
        on_error: 'raise' (a corrupt or truncated image stops with an error naming it) or 'skip' (warn, serve the
            next image, count it).
    """

    def __init__(
        self,
        data_root: str | Path,
        split: str = 'train',
        image_size: ImageSize = 224,
        normalize: Normalize = True,
        augment: bool | None = None,
        on_error: str = 'raise',
    ) -> None:
        self.data_root, self.split, self.image_size = Path(data_root), split, image_size
        root = _find_image_root(self.data_root, split)
        augment = split == 'train' if augment is None else augment
        transform = v2.Compose(_resize_steps(image_size, augment) + _to_tensor(normalize, IMAGENET_MEAN, IMAGENET_STD))
        base = tv_datasets.ImageFolder(str(root), transform=transform, loader=load_image)
        super().__init__(base, base.classes, on_error)


@DATASETS.register_module()
class CIFAR10Dataset(_DictDataset):
    """CIFAR-10 from the python-version batches in ``data_root/cifar-10-batches-py`` (never downloaded).

    Args:
        data_root: folder that contains ``cifar-10-batches-py``.
        split: 'train' (50k images) or 'val' / 'test' (both the 10k test batch).
        image_size: images are resized when this differs from 32.
        normalize: True: CIFAR-10 mean / std; 'symmetric': values in [-1, 1] (for diffusion); False: [0, 1].
        augment: 4-pixel padded random crop + flip; default: ``split == 'train'``.
    """

    def __init__(
        self,
        data_root: str | Path = 'data/cifar10',
        split: str = 'train',
        image_size: ImageSize = 32,
        normalize: Normalize = True,
        augment: bool | None = None,
    ) -> None:
        if split not in SPLIT_NAMES:
            raise ValueError(f'unknown split {split!r}; valid splits: {list(SPLIT_NAMES)}')
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
        if image_size not in (32, (32, 32)):
            steps.append(v2.Resize(image_size, antialias=True))
        transform = v2.Compose(steps + _to_tensor(normalize, CIFAR10_MEAN, CIFAR10_STD))
        try:
            base = tv_datasets.CIFAR10(str(self.data_root), train=split == 'train', transform=transform, download=False)
        except RuntimeError as err:  # torchvision's "Dataset not found or corrupted"
            raise _missing(batches, how + ' (a file is missing or corrupted)') from err
        super().__init__(base, base.classes)
