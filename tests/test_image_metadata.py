"""Image metadata, read the same way everywhere: a phone photo stored sideways with an EXIF orientation comes out
upright in training, evaluation and ``vispe infer`` / ``tools/infer.py``, and a 32-bit integer image whose range the
file does not say is refused naming its mode and the fix instead of decoding to near black. Every file goes through
one loader (``vispe.datasets.images.load_image``); no other code in vispe opens an image file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from PIL import Image
from test_image_folder_training import _options

from vispe.datasets import ImageFolderDataset
from vispe.datasets.samples import SampleError
from vispe.engine.config import load_config
from vispe.engine.train import train
from vispe.evaluation.image_inference import image_view, predict_images

#: stored size (width, height) of the test photo: wide, so a quarter turn shows in the shape
STORED = (40, 20)
#: EXIF orientation -> (where the stored top-left corner is once upright, upright (width, height))
UPRIGHT = {
    1: ('top-left', (40, 20)),
    3: ('bottom-right', (40, 20)),  # turned 180 degrees
    6: ('top-right', (20, 40)),  # stored turned left: turned 90 degrees clockwise to view
    8: ('bottom-left', (20, 40)),  # stored turned right: turned 90 degrees anticlockwise to view
}
NATIVE = dict(type='NativeAspect', patch_size=4, max_tokens=50)  # the whole image at its own aspect ratio


def photo(orientation: int, colour=(230, 230, 230)) -> Image.Image:
    """A dark STORED-size RGB image with a bright top-left quadrant (as stored) and EXIF orientation ``orientation``."""
    width, height = STORED
    pixels = np.full((height, width, 3), 25, np.uint8)
    pixels[: height // 2, : width // 2] = colour
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[274] = orientation
    image.info['exif'] = exif.tobytes()
    return image


def save_photo(path, orientation: int, **options) -> None:
    image = photo(orientation)
    image.save(path, exif=image.info['exif'], **options)


def bright_corner(x: torch.Tensor) -> str:
    """The quadrant of a (C, H, W) image with the highest mean."""
    h, w = x.shape[-2] // 2, x.shape[-1] // 2
    quadrants = {
        'top-left': x[..., :h, :w],
        'top-right': x[..., :h, w:],
        'bottom-left': x[..., h:, :w],
        'bottom-right': x[..., h:, w:],
    }
    return max(quadrants, key=lambda name: quadrants[name].float().mean().item())


def assert_upright(x: torch.Tensor, orientation: int) -> None:
    corner, (width, height) = UPRIGHT[orientation]
    h, w = x.shape[-2:]
    assert (w > h) == (width > height), f'orientation {orientation}: {w}x{h}, expected the aspect of {width}x{height}'
    assert bright_corner(x) == corner, f'orientation {orientation}: bright {bright_corner(x)}, expected {corner}'


def tree_of(root, files: dict) -> None:
    """root/{train,val}/<class>/<name> for {'class/name': writer(path)}."""
    for split in ('train', 'val'):
        for rel, write in files.items():
            path = root / split / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)


@pytest.mark.parametrize('split', ['train', 'val'])
def test_exif_orientation_is_applied_in_training_and_evaluation_data(tmp_path, split) -> None:
    files = {f'a/o{o}.jpg': lambda path, o=o: save_photo(path, o, quality=95) for o in UPRIGHT}
    files['b/png6.png'] = lambda path: save_photo(path, 6)  # PNG's eXIf chunk
    files['b/tif8.tif'] = lambda path: photo(8).save(path, tiffinfo={274: 8})  # TIFF's own orientation tag
    tree_of(tmp_path, files)
    dataset = ImageFolderDataset(tmp_path, split, image_size=20, normalize=False, augment=False, size_policy=NATIVE)
    for index, (path, _) in enumerate(dataset.base.samples):
        orientation = int(re.search(r'(\d)\.\w+$', path).group(1))
        assert_upright(dataset[index]['inputs'], orientation)
    # a fixed (H, W) crop: the tall upright image is resized into it, the bright corner where the viewer sees it
    fixed = ImageFolderDataset(tmp_path, split, image_size=(40, 20), normalize=False, augment=False)
    sideways = [p for p, _ in fixed.base.samples].index(str(tmp_path / split / 'a' / 'o6.jpg'))
    x = fixed[sideways]['inputs']
    assert x.shape == (3, 40, 20) and bright_corner(x) == 'top-right'


def test_exif_orientation_keeps_transparency_and_16_bit_values(tmp_path) -> None:
    """The upright image is still decoded by its mode: a palette's transparent entry is black, 16 bits stay 16."""
    index = np.zeros(STORED[::-1], np.uint8)
    index[:10, :20] = 1  # the stored top-left quadrant: palette entry 1, bright; the rest: entry 0, transparent
    palette = Image.fromarray(index).convert('P')
    palette.putpalette([250, 250, 250, 240, 200, 40])
    exif = palette.getexif()
    exif[274] = 6
    ramp = (np.arange(STORED[0] * STORED[1]).reshape(STORED[::-1]) * 60).astype(np.uint16)
    ramp[:10, :20] = 65535  # bright stored top-left, 16-bit values elsewhere
    tree_of(
        tmp_path,
        {
            'a/p.png': lambda path: palette.save(path, transparency=0, exif=exif),
            'b/ramp16.png': lambda path: Image.fromarray(ramp).save(path, exif=exif),
        },
    )
    dataset = ImageFolderDataset(tmp_path, 'val', image_size=20, normalize=False, augment=False, size_policy=NATIVE)
    assert Image.open(dataset.base.samples[1][0]).mode == 'I;16'
    for i in range(2):
        assert_upright(dataset[i]['inputs'], 6)
    transparent = dataset[0]['inputs'][:, 20:, :]  # stored bottom half, upright: the lower half
    assert transparent.abs().max() == 0  # entry 0 is transparent: black, not its stored (250, 250, 250)
    grey = ImageFolderDataset(tmp_path, 'val', image_size=(40, 20), normalize=False, augment=False)[1]['inputs']
    torch.testing.assert_close(grey[0], torch.from_numpy(np.rot90(ramp, -1) / 65535).float(), atol=1e-6, rtol=0)


def int32_tiff(values) -> callable:
    return lambda path: Image.fromarray(np.asarray(values, np.int32)).save(path)


def test_32_bit_integer_images_are_read_by_a_rule_or_refused(tmp_path) -> None:
    byte_ramp = np.arange(0, 256, 2, dtype=np.int32).reshape(8, 16)  # 0..254: 8-bit data in a 32-bit TIFF
    tree_of(
        tmp_path,
        {
            'a/bytes.tif': int32_tiff(byte_ramp),
            'a/words.tif': int32_tiff(byte_ramp * 257),  # 0..65278: over 255, so 16-bit data
            'b/zeros.tif': int32_tiff(np.zeros((8, 16))),
            'b/dark16.pgm': lambda path: path.write_bytes(b'P5 16 8 65535\n' + (byte_ramp.astype('>u2')).tobytes()),
        },
    )
    dataset = ImageFolderDataset(tmp_path, 'val', image_size=(8, 16), normalize=False, augment=False)
    names = [p.rsplit('/', 1)[1] for p, _ in dataset.base.samples]
    assert Image.open(dataset.base.samples[0][0]).mode == 'I'
    with pytest.raises(SampleError) as info:  # today: values / 65535, at most 0.004 - near black, silently
        dataset[names.index('bytes.tif')]
    message = str(info.value)
    assert '\n' not in message and 'bytes.tif: 32-bit integer image with values 0..254 (mode I)' in message
    assert 'save it as 8-bit (mode L or RGB) or 16-bit (mode I;16) PNG or TIFF' in message
    expected = torch.from_numpy(byte_ramp * 257 / 65535).float()
    torch.testing.assert_close(dataset[names.index('words.tif')]['inputs'][0], expected, atol=1e-6, rtol=0)
    assert dataset[names.index('zeros.tif')]['inputs'].abs().max() == 0
    # a 16-bit PGM says its depth (Pillow reads it as mode I): dark values are 16-bit, not refused, not stretched
    torch.testing.assert_close(
        dataset[names.index('dark16.pgm')]['inputs'][0], torch.from_numpy(byte_ramp / 65535).float(), atol=1e-6, rtol=0
    )
    lenient = ImageFolderDataset(tmp_path, 'val', image_size=(8, 16), normalize=False, augment=False, on_error='skip')
    with pytest.warns(UserWarning, match=r'bytes\.tif: 32-bit integer image .*mode I'):
        assert lenient[names.index('bytes.tif')]['inputs'].shape == (3, 8, 16)  # the next image, counted


class Recorder(torch.nn.Module):
    """A stand-in classifier: keeps what it is given, scores two classes evenly."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[torch.Tensor] = []

    def forward(self, x, mode: str = 'tensor') -> torch.Tensor:
        images = list(x)
        self.seen.extend(images)
        return torch.zeros(len(images), 2)


def test_infer_sees_photos_upright(tmp_path) -> None:
    """What ``vispe infer`` hands the model (``predict_images``, as its main calls it) for each file."""
    for o in UPRIGHT:
        save_photo(tmp_path / f'o{o}.jpg', o, quality=95)
    cfg = load_config('configs/vit/vit_tiny_imagefolder.py')
    cfg.test_dataloader.dataset.size_policy = NATIVE
    view = image_view(cfg, {'dataset_meta': {'classes': ('a', 'b')}})
    model = Recorder()
    results = predict_images(model, [str(tmp_path / f'o{o}.jpg') for o in UPRIGHT], view, topk=1)
    assert all('top' in r for r in results) and len(model.seen) == len(UPRIGHT)
    for orientation, x in zip(UPRIGHT, model.seen):
        assert_upright(x, orientation)


#: one xdist worker runs this module (make test's --dist loadgroup), so its module fixture runs once
#: (a run on sideways photos)
pytestmark = pytest.mark.xdist_group('image_metadata')


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Two steps of vit_tiny_imagefolder.py on sideways phone photos; returns its checkpoint."""
    root = tmp_path_factory.mktemp('photos')
    tree_of(root, {f'{c}/{o}.jpg': lambda path, o=o: save_photo(path, o) for c in ('a', 'b') for o in (1, 6, 8, 3)})
    work = tmp_path_factory.mktemp('work')
    sizes = {f'{split}_dataloader.dataset.image_size': 32 for split in ('train', 'val', 'test')}
    options = _options(root, str(work), **sizes)  # test_image_folder_training's tiny run on this tree
    train('configs/vit/vit_tiny_imagefolder.py', str(work), options)
    return str(work / 'epoch_1.pth')


def test_tools_infer_refuses_an_ambiguous_32_bit_image_and_classifies_the_rest(trained, tmp_path) -> None:
    save_photo(tmp_path / 'phone.jpg', 6)
    int32_tiff(np.arange(0, 256, 2).reshape(8, 16))(tmp_path / 'bytes.tif')
    Image.fromarray((np.arange(128).reshape(8, 16) * 516).astype(np.uint16)).save(tmp_path / 'ramp16.png')
    files = [str(tmp_path / name) for name in ('phone.jpg', 'bytes.tif', 'ramp16.png')]
    proc = subprocess.run(
        [sys.executable, 'tools/infer.py', trained, *files, '--topk', '1'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # today: 0, bytes.tif classified as a black image
    assert f'error: {files[1]}: 32-bit integer image with values 0..254 (mode I)' in proc.stderr
    assert 'save it as 8-bit (mode L or RGB) or 16-bit (mode I;16) PNG or TIFF' in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(': ')[0] for line in lines] == [files[0], files[2]]


def test_no_other_code_opens_image_files() -> None:
    """Every image file vispe reads goes through vispe.datasets.images (EXIF orientation, modes, size limit)."""
    openers = re.compile(
        r'Image\.open\(|PIL\.Image\.open|default_loader|pil_loader|accimage|read_image\(|decode_image\(|'
        r'decode_jpeg\(|cv2\.imread|imageio|plt\.imread|skimage\.io'
    )
    root, found = Path(ROOT), []
    for path in sorted([*(root / 'vispe').rglob('*.py'), *(root / 'tools').rglob('*.py')]):
        if path == root / 'vispe' / 'datasets' / 'images.py':
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split('#', 1)[0]
            if openers.search(code) and 'images import' not in code:
                found.append(f'{path.relative_to(root)}:{number}: {line.strip()}')
    assert not found, 'image files opened outside vispe.datasets.images:\n' + '\n'.join(found)
