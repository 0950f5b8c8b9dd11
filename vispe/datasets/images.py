"""Image files to correctly scaled, upright float pixels in [0, 1], whatever mode Pillow reads, or a ``SampleError``.

``load_image`` = ``decode_image`` of ``open_image``. Modes: 8-bit ones via Pillow's RGB conversion; alpha or a
transparent colour composited over black; I;16* and I from a 16-bit file / 65535; other 32-bit I read as 16-bit when its
maximum is in 256..65535, refused outside 0..65535 or at a maximum in 1..255; F as is when finite in [0, 1]."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision import tv_tensors

from vispe.datasets.samples import SKIP_HINT, SampleError

Decoded: TypeAlias = Image.Image | tv_tensors.Image

CHANNELS = (1, 3)
#: modes holding 16-bit unsigned integers
UINT16_MODES = ('I;16', 'I;16L', 'I;16B', 'I;16N')
#: the largest value of 8-bit data: a mode-I image with no larger value could be 8-bit or dark 16-bit
UINT8_MAX = 255
#: modes with an alpha band (La, RGBa: premultiplied)
ALPHA_MODES = ('LA', 'La', 'PA', 'RGBA', 'RGBa')
#: an image is warned about when a side is under 1/SMALL_IMAGE_FACTOR of the crop's (resized up more than that)
SMALL_IMAGE_FACTOR = 8


def _fail(path: str, problem: str, advice: str = SKIP_HINT, too_large: bool = False) -> SampleError:
    return SampleError(f'{path}: {problem}; {advice}', f'{path}: {problem}', too_large)


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ALPHA_MODES or 'transparency' in image.info


def _over_black(image: Image.Image) -> Image.Image:
    """RGB of an image with alpha composited over opaque black (colours times opacity)."""
    rgba = image.convert('RGBA')
    black = Image.new('RGBA', rgba.size, (0, 0, 0, 255))
    return Image.alpha_composite(black, rgba).convert('RGB')


def _grey_tensor(values: np.ndarray, channels: int) -> tv_tensors.Image:
    grey = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))[None]
    return tv_tensors.Image(grey.expand(channels, -1, -1).contiguous())


def _declared_16_bit(image: Image.Image) -> bool:
    """Whether the file a mode-I image came from says 16-bit samples (PGM / PPM, PNG, 16-bit TIFF)."""
    if image.format in ('PPM', 'PNG'):
        return True
    tags = getattr(image, 'tag_v2', None)
    bits = tags.get(258) if tags is not None else None  # BitsPerSample
    return bits is not None and tuple(bits if isinstance(bits, tuple) else (bits,)) == (16,)


def _high_depth(image: Image.Image, path: str, channels: int) -> tv_tensors.Image:
    """16-bit and 32-bit grey modes as floats in [0, 1], by the module's rules."""
    values = np.asarray(image)
    if image.mode in UINT16_MODES:
        return _grey_tensor(values.astype(np.float32) / 65535.0, channels)
    low, high = (values.min(), values.max()) if values.size else (0, 0)
    if image.mode == 'I':
        declared = _declared_16_bit(image)
        kind = '16-bit integer image' if declared else '32-bit integer image'
        fix = 'save it as 8-bit (mode L or RGB) or 16-bit (mode I;16) PNG or TIFF'
        if low < 0 or high > 65535:
            raise _fail(
                path,
                f'{kind} with values {low}..{high}, outside the 16-bit range 0..65535 vispe reads in mode I; {fix}',
            )
        if not declared and 0 < high <= UINT8_MAX:
            problem = (
                f'{kind} with values {low}..{high} (mode I): 8-bit data (0..255) or a dark 16-bit image (0..65535)? '
                f'the file does not say, and the two differ 257x; {fix}'
            )
            raise _fail(path, problem)
        return _grey_tensor(values.astype(np.float32) / 65535.0, channels)
    finite = np.isfinite(values)
    if not finite.all():
        raise _fail(path, f'32-bit float image with {int((~finite).sum())} NaN or Inf values')
    if low < -1e-6 or high > 1 + 1e-6:
        problem = f'32-bit float image with values {low:.4g}..{high:.4g}; vispe takes float images only in [0, 1]'
        raise _fail(path, problem + ': rescale it to [0, 1] or save it as 8- or 16-bit')
    return _grey_tensor(np.clip(values, 0.0, 1.0), channels)


def decode_image(image: Image.Image, path: str, channels: int = 3) -> Decoded:
    """``image`` (any Pillow mode) as RGB, or grey (ITU-R 601) when ``channels`` is 1; SampleError naming ``path``."""
    if channels not in CHANNELS:
        raise ValueError(f'channels must be 1 (grey) or 3 (RGB), got {channels!r}')
    if image.mode in UINT16_MODES + ('I', 'F'):
        return _high_depth(image, path, channels)
    target = 'RGB' if channels == 3 else 'L'
    try:
        if _has_alpha(image):
            return _over_black(image).convert(target)
        return image.convert(target)
    except ValueError as err:  # Pillow: "conversion from X to Y not supported"
        raise _fail(path, f'mode {image.mode} cannot be converted to {target} ({err})') from None


@contextmanager
def _pillow_size_check_off() -> Iterator[None]:
    """Pillow's own decompression-bomb check off inside the block, so ``load_image`` applies its own limit."""
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = saved


def open_image(path: str, max_pixels: int | None = None) -> Image.Image:
    """The image at ``path`` decoded in full, upright by its EXIF orientation: the one place vispe opens images.
    SampleError naming the file when corrupt, truncated, not an image, or over ``max_pixels`` (None: Pillow's limit)."""
    limit = Image.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    try:
        with _pillow_size_check_off():
            image = Image.open(path)
            try:
                width, height = image.size
                if limit is not None and width * height > limit:
                    raise _fail(
                        path,
                        f'{width}x{height} = {width * height} pixels, over the limit of {limit} pixels (a possible '
                        'decompression bomb)',
                        'if the file is genuine, build the data set with max_image_pixels=N (or set '
                        f'PIL.Image.MAX_IMAGE_PIXELS = N, None for no limit); {SKIP_HINT}',
                        too_large=True,
                    )
                image.load()
                # in place: the same object keeps what the file says (format, TIFF tags) for decode_image
                ImageOps.exif_transpose(image, in_place=True)
            except BaseException:
                image.close()
                raise
        return image
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:  # PIL's ways of saying so
        if isinstance(err, SampleError):
            raise
        raise _fail(path, f'unreadable image ({err})') from None


def load_image(path: str, channels: int = 3, max_pixels: int | None = None) -> Decoded:
    """The file at ``path`` as correctly scaled, upright pixels; SampleError naming the file."""
    with open_image(path, max_pixels) as image:
        return decode_image(image, path, channels)


def image_size(image: Decoded) -> tuple[int, int]:
    if isinstance(image, Image.Image):
        return image.height, image.width
    return int(image.shape[-2]), int(image.shape[-1])


def small_image_message(path: str, size: tuple[int, int], crop: tuple[int, int]) -> str | None:
    """A warning when an image of ``size`` is far smaller than its ``crop`` (a side of 1 or under 1/8 of the crop's)."""
    (height, width), (crop_h, crop_w) = size, crop
    if min(height, width) > 1 and height * SMALL_IMAGE_FACTOR >= crop_h and width * SMALL_IMAGE_FACTOR >= crop_w:
        return None
    factor = max(crop_h / height, crop_w / width)
    return (
        f'{path}: image of {width}x{height} pixels, far smaller than the {crop_w}x{crop_h} crop it is resized to '
        f'({factor:.0f}x); check the file, remove it, or use a smaller image_size'
    )


__all__ = ['SMALL_IMAGE_FACTOR', 'decode_image', 'image_size', 'load_image', 'open_image', 'small_image_message']
