"""Your own images: timm's augmentation as the config sets it, ImageFolder items at native aspect ratios under a token
budget, the ImageFolder config training a few steps, and ``vispe infer`` naming the classes of image files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from timm.data.auto_augment import RandAugment
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision import transforms
from torchvision.transforms import functional as TF

from vispe.cli import main as cli
from vispe.cli.infer import main as infer
from vispe.datasets import ImageFolderDataset
from vispe.datasets.augment import AUGMENT_DEFAULTS
from vispe.datasets.sizes import native_size
from vispe.engine.checkpoint import load_checkpoint
from vispe.engine.config import load_config
from vispe.engine.config_record import recorded_config
from vispe.engine.train import train
from vispe.evaluation.image_inference import _prepare, image_view
from vispe.evaluation.trained_model import load_model
from vispe.registry import DATASETS

COLORS = {'blue': (20, 40, 230), 'red': (230, 30, 20)}
#: (width, height) of the images of each class: square, wide and tall
SIZES = ((40, 40), (64, 32), (30, 60), (48, 36))


def image_tree(root, per_class: int = 4):
    """data_root/{train,val}/{blue,red}/*.png: flat colour (plus noise) at several aspect ratios."""
    generator = torch.Generator().manual_seed(0)
    for split in ('train', 'val'):
        for name, color in COLORS.items():
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                width, height = SIZES[i % len(SIZES)]
                noise = torch.randint(-15, 16, (height, width, 3), generator=generator)
                pixels = (torch.tensor(color) + noise).clamp(0, 255).to(torch.uint8).numpy()
                Image.fromarray(pixels).save(root / split / name / f'{i}.png')
    return root


#: one xdist worker runs this module (make test's --dist loadgroup), so its module fixture runs once
#: (an image tree and a run on it)
pytestmark = pytest.mark.xdist_group('image_folder_training')


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    return image_tree(tmp_path_factory.mktemp('images'))


def _stage_types(dataset) -> list[type]:
    return [type(t) for t in dataset.transform.stages]


def test_the_augment_config_reaches_timm(tree) -> None:
    augment = dict(scale=(0.2, 1.0), hflip=0.0, auto_augment='rand-m9-mstd0.5', re_prob=0.25)
    dataset = ImageFolderDataset(tree, 'train', image_size=32, augment=augment)
    types = _stage_types(dataset)
    assert RandAugment in types and RandomErasing in types and transforms.RandomHorizontalFlip not in types
    crop = dataset.transform.stages[0]
    assert isinstance(crop, RandomResizedCropAndInterpolation) and crop.scale == (0.2, 1.0) and crop.size == (32, 32)
    assert next(t for t in dataset.transform.stages if isinstance(t, RandomErasing)).probability == 0.25
    assert dataset[0]['inputs'].shape == (3, 32, 32)


def test_the_defaults_keep_small_images_whole_enough(tree) -> None:
    dataset = ImageFolderDataset(tree, 'train', image_size=32)  # augment defaults to split == 'train'
    crop = dataset.transform.stages[0]
    assert crop.scale == AUGMENT_DEFAULTS['scale'] == (0.5, 1.0)
    types = _stage_types(dataset)
    assert transforms.RandomHorizontalFlip in types and transforms.ColorJitter not in types
    with pytest.raises(ValueError, match=r"'re_porb'; did you mean 're_prob'"):
        ImageFolderDataset(tree, 'train', image_size=32, augment=dict(re_porb=0.5))


def test_evaluation_is_deterministic_short_side_and_centre_crop(tree) -> None:
    dataset = ImageFolderDataset(tree, 'val', image_size=16, normalize=False)
    assert dataset.transform.augment is None and torch.equal(dataset[1]['inputs'], dataset[1]['inputs'])
    path = dataset.base.samples[1][0]  # a 64 x 32 image: its short side to 16, the centre 16 x 16
    expected = TF.center_crop(TF.resize(TF.to_tensor(Image.open(path).convert('RGB')), 16), 16)
    torch.testing.assert_close(dataset[1]['inputs'], expected, atol=2e-2, rtol=0)


def test_native_aspect_items_keep_their_aspect_ratio_within_the_budget(tree) -> None:
    policy = dict(type='NativeAspect', patch_size=8, max_tokens=24)
    val = ImageFolderDataset(tree, 'val', image_size=32, size_policy=policy)
    for index, (path, _) in enumerate(val.base.samples):
        width, height = Image.open(path).size
        assert tuple(val[index]['inputs'].shape[-2:]) == native_size((height, width), 8, 24)
    train_set = ImageFolderDataset(tree, 'train', image_size=32, size_policy=policy, augment=dict(scale=(0.9, 1.0)))
    torch.manual_seed(0)
    for index, (path, _) in enumerate(train_set.base.samples):
        width, height = Image.open(path).size
        h, w = train_set[index]['inputs'].shape[-2:]
        assert h % 8 == 0 and w % 8 == 0 and (h // 8) * (w // 8) <= 24
        if max(width, height) >= 1.5 * min(width, height):  # a wide image stays wide, a tall one tall
            assert (w > h) == (width > height)
    keyed = {tuple(train_set[(i, 99)]['inputs'].shape) for i in range(len(train_set))}
    assert len(keyed) > 1  # one budget per key, each image at its own aspect ratio


def _options(root, work: str, **extra) -> dict:
    options = {
        'model.backbone.num_classes': 2,
        'model.backbone.depth': 1,
        'model.backbone.embed_dim': 32,
        'model.backbone.num_heads': 2,
        'train_cfg.max_epochs': 1,
        'train_cfg.val_interval': 1,
        'param_scheduler': [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)],
        'train_dataloader.batch_size': 4,
        'val_dataloader.batch_size': 4,
        'test_dataloader.batch_size': 4,
    }
    for split in ('train', 'val', 'test'):
        options.update({
            f'{split}_dataloader.dataset.data_root': str(root),
            f'{split}_dataloader.num_workers': 0,
            f'{split}_dataloader.persistent_workers': False,
        })  # fmt: skip
    return {**options, **extra}


@pytest.fixture(scope='module')
def trained(tree, tmp_path_factory):
    """Two steps of vit_tiny_imagefolder.py on the tree (8 training images, batch 4); returns its checkpoint."""
    work = tmp_path_factory.mktemp('work')
    cfg = train('configs/vit/vit_tiny_imagefolder.py', str(work), _options(tree, str(work)))
    assert cfg.train_dataloader.dataset.augment['scale'] == (0.5, 1.0)
    return str(work / 'epoch_1.pth')


def test_the_imagefolder_config_trains_and_saves_its_class_names(trained) -> None:
    ckpt = load_checkpoint(trained)
    assert ckpt['meta']['dataset_meta']['classes'] == ('blue', 'red') and ckpt['meta']['iter'] == 2


def test_infer_prints_the_top_classes_by_name(trained, tree, capsys) -> None:
    files = [str(p) for p in sorted((tree / 'val').glob('*/*.png'))[:3]]
    infer([trained, *files, '--topk', '2'])  # the config comes from the checkpoint
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    for line, path in zip(lines, files):
        assert line.startswith(f'{path}: ') and line.count('%') == 2
        assert 'blue' in line and 'red' in line
    infer(['configs/vit/vit_tiny_imagefolder.py', trained, files[0], '--topk', '1', '--cfg-options',
           'model.backbone.num_classes=2', 'model.backbone.depth=1', 'model.backbone.embed_dim=32',
           'model.backbone.num_heads=2'])  # fmt: skip
    assert capsys.readouterr().out.count('%') == 1


def test_infer_serves_native_aspect_files_at_the_largest_budget(trained, tree, capsys) -> None:
    wide = str(tree / 'val' / 'red' / '1.png')  # 64 x 32
    policy = "{'type': 'NativeAspect', 'patch_size': 8, 'max_tokens': [16, 32]}"
    infer([trained, wide, '--cfg-options', f'test_dataloader.dataset.size_policy={policy}'])
    assert capsys.readouterr().out.startswith(f'{wide}: ')
    cfg = recorded_config(load_checkpoint(trained), trained, '')
    cfg.test_dataloader.dataset.size_policy = dict(type='NativeAspect', patch_size=8, max_tokens=[16, 32])
    assert _prepare(wide, image_view(cfg, {}))['image'].shape == (3, 32, 64)  # 4 x 8 patches: 32 tokens, 2:1


def test_infer_names_missing_files_and_wrong_checkpoints(trained, tree, tmp_path, capsys) -> None:
    good = str(next((tree / 'val' / 'red').glob('*.png')))
    with pytest.raises(SystemExit, match='1 of 2 files failed'):
        infer([trained, good, str(tmp_path / 'nope.png')])
    captured = capsys.readouterr()
    assert f'error: {tmp_path / "nope.png"}: no such file' in captured.err and good in captured.out
    bogus = tmp_path / 'model.pth'
    bogus.write_text('not a checkpoint')
    with pytest.raises(SystemExit, match='is not a PyTorch checkpoint'):
        infer([str(bogus), good])
    with pytest.raises(SystemExit, match='does not exist'):
        infer([str(tmp_path / 'missing.pth'), good])
    with pytest.raises(SystemExit, match='give a checkpoint and at least one image file'):
        infer([trained])
    with pytest.raises(SystemExit) as info:  # a checkpoint of another config: refused, naming what differs
        infer(['configs/vit/vit_tiny_shapes2d_position.py', trained, good])
    assert str(info.value.code).startswith('error: ') and trained in str(info.value.code)


def test_the_mixedres_imagefolder_config_trains_on_lists(tree, tmp_path) -> None:
    work = tmp_path / 'work'
    train('configs/vit/vit_tiny_imagefolder_mixedres.py', str(work), _options(tree, str(work)))
    assert (work / 'epoch_1.pth').is_file()


def test_the_mixedres_imagefolder_config_trains_square_sizes_per_batch(tree, tmp_path) -> None:
    """FlexiViT-style on your images: one square side per batch (stacked batches, any ViT), through the Runner."""
    work = tmp_path / 'work'
    square = {'type': 'SquareSizes', 'min_size': 16, 'max_size': 48, 'patch_size': 8}
    options = _options(tree, str(work), **{
        'train_dataloader.dataset.size_policy': square,
        'val_dataloader.dataset.size_policy': None,
        'test_dataloader.dataset.size_policy': None,
    })  # fmt: skip
    cfg = train('configs/vit/vit_tiny_imagefolder_mixedres.py', str(work), options)
    assert cfg.train_dataloader.batch_sampler.type == 'SharedSizeBatchSampler'
    assert (work / 'epoch_1.pth').is_file()


def square_tree(root):
    """val/{a,b}/0.png: a 40x40 black image with a white 20x20 square in its centre."""
    pixels = torch.zeros(40, 40, 3, dtype=torch.uint8)
    pixels[10:30, 10:30] = 255
    for name in ('a', 'b'):
        (root / 'val' / name).mkdir(parents=True)
        Image.fromarray(pixels.numpy()).save(root / 'val' / name / '0.png')
    return root


def white_box(image: torch.Tensor) -> tuple[int, int]:
    """(height, width) of the bright region of a (3, H, W) image normalised with ImageNet's mean / std."""
    bright = image.mean(0) > 1.0
    rows, cols = bright.any(1).nonzero(), bright.any(0).nonzero()
    return int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)


def test_an_evaluation_at_another_aspect_keeps_the_images_aspect_unless_told(tmp_path) -> None:
    """Before: an (H, W) evaluation size stretched every image to it (a square became a 1:2 box at 32x64). Now the
    default scales to cover and cuts the centre out; 'pad' fits and pads; 'stretch' is there when asked for."""
    root = square_tree(tmp_path)
    boxes = {}
    for resize in ('crop', 'pad', 'stretch'):
        data = ImageFolderDataset(root, split='val', image_size=(32, 64), normalize=True, resize=resize)
        image = data[0]['inputs']
        assert image.shape == (3, 32, 64)
        boxes[resize] = white_box(image)
    assert boxes == {'crop': (32, 32), 'pad': (16, 16), 'stretch': (16, 32)}
    with pytest.raises(ValueError, match=r"resize must be one of \['crop', 'pad', 'stretch'\], got 'squash'"):
        ImageFolderDataset(root, split='val', image_size=(32, 64), resize='squash')


def test_the_resolution_sweep_records_how_it_resized(trained, tree, tmp_path) -> None:
    from vispe.evaluation import report
    from vispe.sweeps import resolution as R

    cfg = load_config('configs/vit/vit_tiny_imagefolder.py', _options(tree, str(tmp_path)))
    crop = R.sweep(cfg, trained, [(32, 64)], None, 'cpu', show_progress=False, out_dir=str(tmp_path / 'crop'))
    assert crop['resize'] == 'crop' and 'other aspect ratios by centre crop' in report.describe(crop)
    stretch = R.sweep(cfg, trained, [(32, 64)], None, 'cpu', show_progress=False, out_dir=str(tmp_path / 'stretch'),
                      resize='stretch')  # fmt: skip
    assert stretch['resize'] == 'stretch' and 'by stretching' in report.describe(stretch)
    with pytest.raises(ValueError, match='holds the results of'):  # another resize is another sweep's numbers
        R.sweep(cfg, trained, [(32, 64)], None, 'cpu', show_progress=False, out_dir=str(tmp_path / 'crop'),
                resize='pad')  # fmt: skip
    shapes = load_config('configs/vit/vit_tiny_rope_mixed_shapes2d_position.py')
    with pytest.raises(ValueError, match=r'--resize pad: the test set \(Shapes2D\) renders each size itself'):
        R.resize_setting(shapes, 'pad')


# --- labels follow class names, not folder order -------------------------------------------------------------------
CONFIG = 'configs/vit/vit_tiny_imagefolder.py'


def _eval_options(tmp_path) -> dict:
    """The trained model's options, evaluating on ``tmp_path / 'data'``."""
    options = _options(tmp_path / 'data', str(tmp_path / 'logs'))
    return {k: v for k, v in options.items() if not k.startswith(('train', 'param_scheduler'))}


def test_given_classes_label_by_name_in_any_folder_order(tree, tmp_path) -> None:
    dataset = ImageFolderDataset(tree, 'val', image_size=16, classes=['red', 'blue'])
    assert dataset.metainfo['classes'] == ('red', 'blue')
    assert all(label == ['red', 'blue'].index(Path(path).parent.name) for path, label in dataset.base.samples)
    shutil.copytree(tree / 'val' / 'red', tmp_path / 'val' / 'red')  # one class of two: its label is still 'red's
    subset = ImageFolderDataset(tmp_path, 'val', image_size=16, classes=['blue', 'red'])
    assert {label for _, label in subset.base.samples} == {1} and subset.num_classes == 2
    (tmp_path / 'val' / 'red').rename(tmp_path / 'val' / 'zzz_red')
    with pytest.raises(ValueError, match=r"class folder\(s\) 'zzz_red' under .* are not among the model's classes"):
        ImageFolderDataset(tmp_path, 'val', image_size=16, classes=['blue', 'red'])


@pytest.mark.parametrize('tool', ['test', 'eval-resolution'])
def test_evaluation_refuses_a_renamed_class_folder(trained, tree, tmp_path, tool) -> None:
    """Before: `mv val/blue val/zzz_blue` flipped every label (folder order), and the tools printed the flipped
    accuracy with exit 0."""
    shutil.copytree(tree, tmp_path / 'data')
    (tmp_path / 'data' / 'val' / 'blue').rename(tmp_path / 'data' / 'val' / 'zzz_blue')
    options = [f'{k}={v}' for k, v in _eval_options(tmp_path).items()]
    args = [CONFIG, trained, '--cfg-options', *options]
    args += ['--work-dir', str(tmp_path / 'logs')] if tool == 'test' else ['--out', str(tmp_path / 'out')]
    with pytest.raises(SystemExit) as info:
        cli([tool, *args])
    assert "'zzz_blue'" in str(info.value.code) and "not among the model's classes" in str(info.value.code)


def test_evaluation_maps_a_split_that_lacks_a_class_by_name(trained, tree, tmp_path, capsys) -> None:
    """Before: a val folder with only 'red' numbered it 0 (the model's 'blue'); the advice to allow extra outputs
    then gave a wrong score. Now its images keep label 1 and the score is the model's on them."""
    shutil.copytree(tree / 'val' / 'red', tmp_path / 'data' / 'val' / 'red')
    options = [f'{k}={v}' for k, v in _eval_options(tmp_path).items()]
    cli(['test', CONFIG, trained, '--work-dir', str(tmp_path / 'logs'), '--cfg-options', *options])
    score = float(capsys.readouterr().out.split('accuracy/top1: ')[1].split()[0])
    cfg = load_config(CONFIG, _eval_options(tmp_path))
    model, _ = load_model(cfg, trained, 'cpu')
    data = DATASETS.build(cfg.test_dataloader.dataset)
    with torch.no_grad():
        predicted = [model(data[i]['inputs'][None], mode='tensor').argmax(-1).item() for i in range(len(data))]
    assert {data[i]['labels'] for i in range(len(data))} == {1}
    assert score == pytest.approx(100 * sum(p == 1 for p in predicted) / len(predicted))


def test_a_finished_sweep_is_reused_only_while_its_data_is_unchanged(trained, tree, tmp_path, capfd) -> None:
    """Before: the reuse check covered the checkpoint and the config, so results of an image folder that had since
    gained, lost or changed files were reused as this data's."""
    shutil.copytree(tree, tmp_path / 'data')
    options = [f'{k}={v}' for k, v in _eval_options(tmp_path).items()]
    args = ['eval-resolution', CONFIG, trained, '--out', str(tmp_path / 'out'), '--resolutions', '32', '48',
            '--strategy', 'bicubic', '--no-progress', '--cfg-options', *options]  # fmt: skip
    for _ in range(2):
        with pytest.raises(SystemExit) as info:
            cli(args)
        assert not info.value.code
    out = capfd.readouterr().out
    assert 'reusing 2 of 2 finished cells of ' in out and '(bicubic @ 32, bicubic @ 48)' in out
    shutil.copy(tmp_path / 'data' / 'val' / 'red' / '0.png', tmp_path / 'data' / 'val' / 'red' / 'new.png')
    with pytest.raises(SystemExit, match=r'data that changed since .*--force'):
        cli(args)


@pytest.mark.parametrize('workers', [0, 2])
def test_a_zero_byte_image_in_training_is_one_line(tree, tmp_path, workers) -> None:
    """Before: mmengine's 45-line traceback of the training loop came first (a worker's re-raise carries its own)."""
    shutil.copytree(tree, tmp_path / 'data')
    (tmp_path / 'data' / 'train' / 'red' / '0.png').write_bytes(b'')
    options = _options(tmp_path / 'data', str(tmp_path / 'work'))
    options.update({'train_dataloader.num_workers': workers, 'train_dataloader.persistent_workers': False})
    listed = [f'{k}={v}' for k, v in options.items() if not k.startswith('param_scheduler')]
    with pytest.raises(SystemExit) as info:
        cli(['train', CONFIG, '--work-dir', str(tmp_path / 'work'), '--cfg-options', *listed])
    message = str(info.value.code)
    assert message.startswith('error: ') and '\n' not in message and '0.png: unreadable image' in message


def test_infer_advises_only_what_infer_can_set(trained, tree, capsys) -> None:
    """Before: an image over the pixel limit was told to build a data set with max_image_pixels=N or on_error='skip',
    neither of which infer reads. Now infer reads the limit from its config's test set, and says so."""
    image = str(tree / 'val' / 'red' / '0.png')  # 40 x 40 = 1600 pixels
    with pytest.raises(SystemExit, match='1 of 1 files failed'):
        infer([trained, image, '--cfg-options', 'test_dataloader.dataset.max_image_pixels=1000'])
    err = capsys.readouterr().err
    assert 'over the limit of 1000 pixels' in err
    assert 'pass --cfg-options test_dataloader.dataset.max_image_pixels=N' in err
    assert 'on_error' not in err and 'build the data set' not in err
    infer([trained, image, '--cfg-options', 'test_dataloader.dataset.max_image_pixels=2000'])
    assert capsys.readouterr().out.startswith(f'{image}: ')


def test_infer_refuses_an_option_that_nothing_reads(trained, tree) -> None:
    """Before: ``--cfg-options image_size=48`` on the checkpoint's config was merged, read by nothing, and the files
    were classified at the old size."""
    image = str(tree / 'val' / 'red' / '0.png')
    with pytest.raises(SystemExit, match=r'image_size: .* set test_dataloader\.dataset\.image_size'):
        infer([trained, image, '--cfg-options', 'image_size=48'])
