"""Classify a user's image files with a trained classifier, prepared as its test data set prepares images, with the
class names of the checkpoint's training data. An unreadable file is reported in its result."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from vispe.datasets.augment import ImageTransform
from vispe.datasets.folder import IMAGENET_MEAN, IMAGENET_STD, normalization_stats
from vispe.datasets.images import image_size as decoded_size
from vispe.datasets.images import load_image, small_image_message
from vispe.datasets.samples import SampleError, SampleWarning, read_sample_file
from vispe.datasets.sizes import build_size_policy
from vispe.evaluation.trained_model import rank_classes
from vispe.files import check_file, files_inside
from vispe.registry import DATASETS

#: what a directory given as an image is searched for, to name the images in it
IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.bmp', '.gif', '.tif', '.tiff', '.webp', '.ppm', '.pgm')

#: the data sets whose items ``image_view`` knows how to reproduce from a file
IMAGE_DATASETS = ('ImageFolderDataset', 'Shapes2D')


def _classes_of(data_cfg: Any, meta: dict) -> tuple[str, ...]:
    """The class names: the checkpoint's ``dataset_meta``, else the data set's own."""
    classes = (meta.get('dataset_meta') or {}).get('classes')
    if classes:
        return tuple(classes)
    if data_cfg.type == 'Shapes2D':
        return tuple(DATASETS.build(dict(data_cfg, num_samples=0)).classes)
    try:
        return tuple(DATASETS.build(dict(data_cfg)).classes)
    except FileNotFoundError as err:
        raise ValueError(
            'the checkpoint holds no class names (meta.dataset_meta.classes, which mmengine saves from the training '
            f'data set) and its data set is not on disk to read them from: {err}'
        ) from None


def image_view(cfg: Any, meta: dict | None = None) -> dict:
    """What a file must become to look like the config's test images (``transform``, ``channels``, ``classes``); a
    config testing on something else is refused."""
    data_cfg = (cfg.get('test_dataloader') or cfg.get('val_dataloader') or {}).get('dataset')
    if data_cfg is None or data_cfg.get('type') not in IMAGE_DATASETS:
        kind = None if data_cfg is None else data_cfg.get('type')
        raise ValueError(
            f'the config tests on {kind!r}, not on images vispe can read from files ({", ".join(IMAGE_DATASETS)})'
        )
    image_size = data_cfg.get('image_size', 224 if data_cfg.type == 'ImageFolderDataset' else 32)
    channels = int(data_cfg.get('channels', 3))
    if data_cfg.type == 'Shapes2D':  # rendered scenes in [-1, 1] (normalize=True) or [0, 1]
        normalize: bool | str = 'symmetric' if data_cfg.get('normalize', True) else False
    else:
        normalize = data_cfg.get('normalize', True)
    mean, std = normalization_stats(normalize, IMAGENET_MEAN, IMAGENET_STD, channels)
    policy = build_size_policy(data_cfg.get('size_policy'))
    transform = ImageTransform(image_size, None, mean, std, policy, data_cfg.get('interpolation', 'bilinear'))
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    return {
        'transform': transform,
        'policy': policy,
        'size': size,
        'channels': channels,
        'max_pixels': data_cfg.get('max_image_pixels'),
        'classes': _classes_of(data_cfg, meta or {}),
    }


def _prepare(path: str, view: dict) -> dict:
    """{'file', 'image' or 'error', 'warnings'}: one file read as ``view`` says, its problems caught and named."""

    def read() -> torch.Tensor:
        check_file(path, 'image', f'{path}: no such file', lambda d: files_inside(d, IMAGE_SUFFIXES, 'images'))
        try:
            image = load_image(path, channels=view['channels'], max_pixels=view['max_pixels'])
        except SampleError as err:  # the data set's advice (on_error, max_image_pixels=) is not this tool's
            setting = '--cfg-options test_dataloader.dataset.max_image_pixels=N'
            raise SampleError(
                f'{err.problem}; if the file is genuine, pass {setting}' if err.too_large else err.problem
            ) from None
        policy = view['policy']
        draw = None if policy is None else policy.largest()  # deterministic: the largest side or budget
        hw = decoded_size(image)
        message = small_image_message(path, hw, view['size'] if policy is None else policy.size(draw, hw))
        if message:
            warnings.warn(message, SampleWarning, stacklevel=2)
        return view['transform'](image, draw)

    return read_sample_file(path, 'image', read)


@torch.no_grad()
def predict_images(
    model: torch.nn.Module, paths: Sequence[str], view: dict, topk: int = 5, batch_size: int = 32
) -> list[dict]:
    """One result per file, in order: ``{'file', 'top': [(class, probability)] * topk, 'warnings'}`` or ``{'file',
    'error', 'warnings'}``."""
    if topk < 1:
        raise ValueError(f'topk must be a positive int, got {topk}')
    device = next(model.parameters()).device

    def logits(images: list[torch.Tensor]) -> torch.Tensor:
        images = [image.to(device) for image in images]
        same = len({tuple(image.shape) for image in images}) == 1
        return model(torch.stack(images) if same else images, mode='tensor')

    results = [_prepare(path, view) for path in paths]
    return rank_classes(results, 'image', view['classes'], topk, batch_size, logits)


__all__ = ['IMAGE_DATASETS', 'image_view', 'predict_images']
