"""Honest pixels: every image mode Pillow reads decodes to correctly scaled values (a 16-bit PNG is a ramp in [0, 1],
not 255s), what cannot be converted is refused naming the file, a decompression bomb names the limit and how to
raise it, a tiny image is warned about once, and an empty class folder is named."""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from vispe.datasets import ImageFolderDataset
from vispe.datasets.images import decode_image, load_image
from vispe.datasets.samples import MAX_NAMED_WARNINGS, SampleError, SampleWarning

RAMP16 = (np.arange(8 * 16).reshape(8, 16) * 516).astype(np.uint16)  # 0 .. 65532 in steps of 516


def png_bytes(width: int, height: int, bit_depth: int, colour_type: int, rows: bytes = b'') -> bytes:
    """A PNG written by hand: Pillow cannot write 16-bit RGB, and a bomb needs a header that lies about its size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))

    header = struct.pack('>IIBBBBB', width, height, bit_depth, colour_type, 0, 0, 0)
    body = chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')
    return b'\x89PNG\r\n\x1a\n' + body


def decoded(path, channels: int = 3) -> torch.Tensor:
    """What load_image gives, as (C, H, W) floats in [0, 1] (the data sets' ToImage / ToDtype(scale=True))."""
    from torchvision.transforms import v2

    image = load_image(str(path), channels)
    return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])(image).as_subclass(torch.Tensor)


def test_16_bit_png_decodes_to_a_ramp_not_to_255s(tmp_path) -> None:
    path = tmp_path / 'ramp16.png'
    Image.fromarray(RAMP16).save(path)
    assert Image.open(path).mode == 'I;16'
    clipped = np.asarray(Image.open(path).convert('RGB'))
    assert (clipped == 255).mean() > 0.99  # what Image.convert('RGB') does: the bug
    x = decoded(path)
    assert x.shape == (3, 8, 16) and x.dtype == torch.float32
    expected = torch.from_numpy(RAMP16.astype(np.float32) / 65535)
    torch.testing.assert_close(x, expected.expand(3, -1, -1), atol=1e-6, rtol=0)
    assert x[0, 0, 1] - x[0, 0, 0] == pytest.approx(516 / 65535)  # 16-bit steps survive (1/255 would not)
    torch.testing.assert_close(decoded(path, channels=1)[0], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    'mode, suffix, scale',
    [('I;16B', 'tif', 65535), ('I;16', 'tif', 65535), ('I', 'tif', 65535), ('F', 'tif', 65535)],
)
def test_high_depth_modes_are_scaled_to_unit_range(tmp_path, mode, suffix, scale) -> None:
    values = RAMP16.astype(np.float32 if mode == 'F' else np.int64)
    if mode == 'F':
        values = values / scale  # float images are taken as is in [0, 1]
    image = Image.fromarray(values.astype({'I;16B': '>u2', 'I;16': '<u2', 'I': '<i4', 'F': '<f4'}[mode]))
    path = tmp_path / f'x.{suffix}'
    image.save(path)
    assert Image.open(path).mode == mode
    torch.testing.assert_close(decoded(path)[1], torch.from_numpy(RAMP16 / 65535).float(), atol=1e-6, rtol=0)


def rgb_of(values, size=(4, 2)) -> np.ndarray:
    return np.broadcast_to(np.asarray(values, dtype=np.float32) / 255, (size[1], size[0], 3))


def test_8_bit_and_colour_modes(tmp_path) -> None:
    red_green = np.zeros((2, 4), np.uint8)
    red_green[:, 2:] = 1
    palette = Image.fromarray(red_green).convert('P')
    palette.putpalette([200, 10, 20, 5, 250, 40])
    palette.save(tmp_path / 'p.png')
    x = decoded(tmp_path / 'p.png').permute(1, 2, 0).numpy()
    np.testing.assert_allclose(x[:, :2], rgb_of((200, 10, 20), (2, 2)), atol=1e-6)
    np.testing.assert_allclose(x[:, 2:], rgb_of((5, 250, 40), (2, 2)), atol=1e-6)

    Image.new('L', (4, 2), 77).save(tmp_path / 'l.png')
    np.testing.assert_allclose(decoded(tmp_path / 'l.png').permute(1, 2, 0).numpy(), rgb_of((77, 77, 77)), atol=1e-6)
    bits = Image.new('1', (4, 2), 0)
    bits.putpixel((1, 0), 1)
    bits.save(tmp_path / 'b.png')
    x = decoded(tmp_path / 'b.png')
    assert x[:, 0, 1].tolist() == [1.0, 1.0, 1.0] and x.sum() == 3
    Image.new('CMYK', (4, 2), (0, 255, 0, 0)).save(tmp_path / 'c.tif')  # no magenta ink absorbed: magenta
    np.testing.assert_allclose(decoded(tmp_path / 'c.tif').permute(1, 2, 0).numpy(), rgb_of((255, 0, 255)))
    Image.new('RGB', (4, 2), (30, 140, 220)).convert('YCbCr').save(tmp_path / 'y.tif')
    assert Image.open(tmp_path / 'y.tif').mode == 'YCbCr'
    np.testing.assert_allclose(
        decoded(tmp_path / 'y.tif').permute(1, 2, 0).numpy(), rgb_of((30, 140, 220)), atol=3 / 255
    )
    grey = decoded(tmp_path / 'c.tif', channels=1)  # magenta as luma: 0.299 R + 0.587 G + 0.114 B
    assert grey.shape == (1, 2, 4) and grey.mean().item() == pytest.approx((0.299 + 0.114), abs=2 / 255)


def test_16_bit_rgb_png_is_pillows_top_byte(tmp_path) -> None:
    """Pillow reads 16-bit RGB as 8-bit RGB (the top byte): scaled right, 8 bits of precision."""
    pixels = np.array([[[65535, 32896, 0]] * 3] * 2, dtype='>u2')  # (2, 3, 3)
    rows = b''.join(b'\x00' + row.tobytes() for row in pixels)
    (tmp_path / 'rgb16.png').write_bytes(png_bytes(3, 2, 16, 2, rows))
    x = decoded(tmp_path / 'rgb16.png')
    assert x[:, 0, 0].tolist() == pytest.approx([1.0, 128 / 255, 0.0])


def test_alpha_is_composited_over_black(tmp_path) -> None:
    rgba = np.zeros((2, 4, 4), np.uint8)
    rgba[..., :3] = (255, 200, 100)
    rgba[:, :2, 3] = 0  # transparent, hiding a bright colour
    rgba[:, 2, 3] = 255
    rgba[:, 3, 3] = 128
    Image.fromarray(rgba).save(tmp_path / 'rgba.png')
    x = decoded(tmp_path / 'rgba.png')
    assert x[:, :, :2].abs().max() == 0  # transparent -> black, whatever is stored under it
    torch.testing.assert_close(x[:, 0, 2], torch.tensor([255, 200, 100]) / 255.0)
    torch.testing.assert_close(x[:, 0, 3], torch.tensor([255, 200, 100]) / 255.0 * 128 / 255, atol=1 / 255, rtol=0)

    grey_alpha = np.stack([np.full((2, 4), 200, np.uint8), np.array([[0, 255] * 2] * 2, np.uint8)], -1)
    Image.fromarray(grey_alpha).save(tmp_path / 'la.png')
    assert Image.open(tmp_path / 'la.png').mode == 'LA'
    x = decoded(tmp_path / 'la.png')
    assert x[:, :, 0].max() == 0 and x[:, :, 1].flatten().tolist() == pytest.approx([200 / 255] * 6)

    index = np.array([[0, 1, 0, 1]] * 2, np.uint8)
    palette = Image.fromarray(index).convert('P')
    palette.putpalette([250, 250, 250, 10, 20, 30])
    palette.save(tmp_path / 'pt.png', transparency=0)  # palette entry 0 is transparent
    x = decoded(tmp_path / 'pt.png')
    assert x[:, :, 0].max() == 0
    torch.testing.assert_close(x[:, 0, 1], torch.tensor([10, 20, 30]) / 255.0)
    palette.save(tmp_path / 'po.png')  # the same palette without transparency: entry 0 is white-ish
    assert decoded(tmp_path / 'po.png')[:, 0, 0].tolist() == pytest.approx([250 / 255] * 3)


@pytest.mark.parametrize(
    'values, words',
    [
        (np.array([[0.0, 1000.0]], np.float32), r'32-bit float image with values 0\.\.1000.*\[0, 1\]'),
        (np.array([[0.0, np.nan]], np.float32), '32-bit float image with 1 NaN or Inf values'),
        (np.array([[-5, 10]], np.int32), r'32-bit integer image with values -5\.\.10, outside .*0\.\.65535'),
    ],
    ids=['float-range', 'nan', 'negative-int'],
)
def test_unconvertible_images_name_the_file(tmp_path, values, words) -> None:
    path = tmp_path / 'odd.tif'
    Image.fromarray(values).save(path)
    with pytest.raises(SampleError, match=rf'odd\.tif: {words}.*on_error=.skip.'):
        load_image(str(path))
    with pytest.raises(SampleError, match='odd.tif'):
        decode_image(Image.open(path), str(path))


def image_tree(root, images: dict) -> None:
    """root/train/<class>/<name> for {relative path: PIL image or bytes}."""
    for rel, content in images.items():
        path = root / 'train' / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            content.save(path)


def test_image_folder_trains_on_16_bit_pixels(tmp_path) -> None:
    image_tree(tmp_path, {'a/0.png': Image.fromarray(RAMP16), 'b/0.png': Image.new('RGB', (16, 8), (0, 0, 255))})
    dataset = ImageFolderDataset(tmp_path, image_size=(8, 16), normalize=False, augment=False)
    x = dataset[0]['inputs']
    assert x.dtype == torch.float32 and x.max() < 1.0 and x.min() == 0.0
    torch.testing.assert_close(x[0], torch.from_numpy(RAMP16 / 65535).float(), atol=1e-6, rtol=0)
    grey = ImageFolderDataset(tmp_path, image_size=(8, 16), normalize='symmetric', augment=False, channels=1)
    assert grey[0]['inputs'].shape == (1, 8, 16) and grey[1]['inputs'].mean() == pytest.approx(0.114 * 2 - 1, abs=0.01)
    with pytest.raises(ValueError, match='channels must be 1'):
        ImageFolderDataset(tmp_path, image_size=8, channels=4)


def bomb() -> bytes:
    """A 60-byte PNG whose header claims 200,000 x 200,000 pixels."""
    return png_bytes(200_000, 200_000, 1, 0)


def test_decompression_bomb_names_the_limit_and_how_to_raise_it(tmp_path) -> None:
    image_tree(tmp_path, {'a/0.png': Image.new('RGB', (8, 8)), 'a/bomb.png': bomb(), 'b/0.png': Image.new('L', (8, 8))})
    strict = ImageFolderDataset(tmp_path, image_size=8)
    index = [p for p, _ in strict.base.samples].index(str(tmp_path / 'train' / 'a' / 'bomb.png'))
    limit = Image.MAX_IMAGE_PIXELS
    with pytest.raises(SampleError) as info:
        strict[index]
    message = str(info.value)
    assert '\n' not in message and 'bomb.png: 200000x200000 = 40000000000 pixels' in message
    assert f'limit of {limit} pixels' in message and 'max_image_pixels=N' in message
    assert 'PIL.Image.MAX_IMAGE_PIXELS' in message
    lenient = ImageFolderDataset(tmp_path, image_size=8, on_error='skip')
    with pytest.warns(UserWarning, match=rf'bomb\.png: .*limit of {limit} pixels.*max_image_pixels=N'):
        assert lenient[index]['inputs'].shape == (3, 8, 8)
    assert Image.MAX_IMAGE_PIXELS == limit  # Pillow's global is left as it was
    # A limit of the data set's own: a 16 x 16 image is over 100 pixels (Pillow's band of a mere warning too).
    image_tree(tmp_path, {'b/big.png': Image.new('RGB', (16, 16))})
    small_limit = ImageFolderDataset(tmp_path, image_size=8, max_image_pixels=100)
    big = [p for p, _ in small_limit.base.samples].index(str(tmp_path / 'train' / 'b' / 'big.png'))
    with pytest.raises(SampleError, match=r'big\.png: 16x16 = 256 pixels, over the limit of 100 pixels'):
        small_limit[big]


def test_tiny_images_are_warned_about_once_per_file(tmp_path) -> None:
    image_tree(
        tmp_path,
        {'a/dot.png': Image.new('RGB', (1, 1), (9, 9, 9)), 'a/ok.png': Image.new('RGB', (32, 32)),
         'b/thin.png': Image.new('RGB', (64, 3)), 'b/ok.png': Image.new('RGB', (5, 5))},
    )  # fmt: skip
    dataset = ImageFolderDataset(tmp_path, image_size=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(3):  # three epochs
            items = [dataset[i] for i in range(len(dataset))]
    messages = [str(w.message) for w in caught if issubclass(w.category, SampleWarning)]
    assert len(items) == 4 and len(messages) == 2, messages  # 5 px for 32 (6.4x) is not warned about
    assert 'dot.png: image of 1x1 pixels, far smaller than the 32x32 crop' in messages[0]
    assert 'thin.png: image of 64x3 pixels' in messages[1]
    # DataLoader workers share the flags: two epochs in two workers flag each small file once, seen by the main process
    fresh = ImageFolderDataset(tmp_path, image_size=32)
    loader = torch.utils.data.DataLoader(fresh, batch_size=2, num_workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the workers' warnings go to their own stderr
        for _ in range(2):
            list(loader)
    small = sorted(fresh.base.samples[i][0].rsplit('/', 1)[1] for i in fresh.warn_once.flags.nonzero().flatten())
    assert small == ['dot.png', 'thin.png']


def test_warnings_stop_naming_files_after_a_cap(tmp_path) -> None:
    image_tree(tmp_path, {f'a/{i}.png': Image.new('L', (1, 1)) for i in range(MAX_NAMED_WARNINGS + 5)})
    dataset = ImageFolderDataset(tmp_path, image_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        [dataset[i] for i in range(len(dataset))]
    messages = [str(w.message) for w in caught]
    assert len(messages) == MAX_NAMED_WARNINGS + 1 and 'further ones are not named' in messages[-1]


def test_empty_class_folder_names_its_path(tmp_path) -> None:
    image_tree(tmp_path, {'a/0.png': Image.new('RGB', (8, 8)), 'b/notes.txt': b'no images here'})
    (tmp_path / 'train' / 'c').mkdir()
    with pytest.raises(FileNotFoundError) as info:
        ImageFolderDataset(tmp_path, image_size=8)
    message = str(info.value)
    assert f'{tmp_path / "train" / "b"}, {tmp_path / "train" / "c"}' in message
    assert 'add images to it or remove the folder' in message and '.png' in message
    assert str(tmp_path / 'train' / 'a') not in message


def test_bomb_helper_is_a_bomb_to_pillow() -> None:
    """The bomb helper really is a bomb to Pillow (so the test above tests what it says)."""
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(bomb()))
