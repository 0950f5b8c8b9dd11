"""A classifier's output count is checked against its data sets' classes before the first step (a 2-class ImageFolder
used to train silently with 27 outputs), and a RandomResizedCropBox pipeline (with a 'crop' key) trains a classifier
(it used to crash with "forward() got an unexpected keyword argument 'crop'")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from mmengine.runner import Runner
from PIL import Image
from test_tools import run_tool, tiny_config

from vispe.datasets import ImageFolderDataset, Primitives3D, Shapes2D
from vispe.engine.config import load_config, without_validation
from vispe.engine.data_checks import ClassCountError, ClassCountHook
from vispe.registry import MODELS


def image_tree(root, classes=('a', 'b'), split='train'):
    for cls in classes:
        (root / split / cls).mkdir(parents=True)
        for i in range(4):
            Image.new('RGB', (32, 32), (60 * i, 100, 200)).save(root / split / cls / f'{i}.png')
    return root


def runner_for(tmp_path, **changes) -> Runner:
    cfg = load_config(tiny_config(tmp_path), work_dir=str(tmp_path / 'work'))
    for key, value in changes.items():
        cfg.merge_from_dict({key: value})
    return Runner.from_cfg(cfg)


def test_more_outputs_than_classes_is_refused_before_training(tmp_path) -> None:
    root = image_tree(tmp_path / 'data')
    folder = dict(_delete_=True, type='ImageFolderDataset', data_root=str(root), image_size=32, normalize=False)
    runner = runner_for(tmp_path, **{'train_dataloader.dataset': folder, 'val_cfg': None, 'val_dataloader': None,
                                     'val_evaluator': None, 'train_cfg.val_interval': None})  # fmt: skip
    assert runner.cfg.model.backbone.num_classes == 27
    with pytest.raises(ClassCountError) as info:
        runner.train()
    message = str(info.value)
    assert (
        '\n' not in message and 'ImageClassifier has 27 outputs but the train data set (ImageFolderDataset' in message
    )
    assert 'only 2 classes' in message and 'set model.backbone.num_classes=2' in message
    assert runner.iter == 0 and not list((tmp_path / 'work').glob('*.pth'))  # no step, no checkpoint


def test_test_runs_check_the_test_data_set(tmp_path) -> None:
    """tools/test.py runs Runner.test(): the test loader is checked, and the unbuilt train loop is left unbuilt."""
    runner = runner_for(tmp_path, **{'model.backbone.num_classes': 5})
    with pytest.raises(
        ClassCountError,
        match=r'has 5 outputs but the test data set \(Shapes2D\) has 27 classes: '
        r'labels 5\.\.26 are classes it never learned; evaluate it on data of the classes it was '
        r'trained on$',
    ):  # fmt: skip  (a trained model's num_classes is not the fix)
        runner.test()
    assert isinstance(runner._train_loop, dict)


def fake_runner(model, train=None, val=None, test=None) -> SimpleNamespace:
    def loop(dataset):
        return None if dataset is None else SimpleNamespace(dataloader=torch.utils.data.DataLoader(dataset))

    return SimpleNamespace(model=model, _train_loop=loop(train), _val_loop=loop(val), _test_loop=loop(test))


def test_point_classifiers_and_the_escape_hatch() -> None:
    model = MODELS.build(
        dict(type='PointClassifier', backbone=dict(type='PointTransformer', num_classes=3, depth=1, embed_dim=16,
             num_heads=2, num_groups=4, group_size=4, group_hidden=8))
    )  # fmt: skip
    data = Primitives3D(num_samples=4, num_points=16)
    assert data.num_classes != 3
    with pytest.raises(ClassCountError, match=rf'PointClassifier has 3 outputs but the train data set \(Primitives3D\) '
                       rf'has {data.num_classes} classes'):  # fmt: skip
        ClassCountHook().before_run(fake_runner(model, train=data))
    model.backbone.num_classes = data.num_classes
    ClassCountHook().before_run(fake_runner(model, train=data))  # matching: nothing said
    model.backbone.num_classes = data.num_classes + 2
    with pytest.raises(ClassCountError, match='2 extra outputs'):
        ClassCountHook().before_run(fake_runner(model, train=data))
    ClassCountHook(allow_extra_outputs=True).before_run(fake_runner(model, train=data))
    model.backbone.num_classes = data.num_classes - 1
    with pytest.raises(ClassCountError, match='have no output'):  # fewer outputs: never allowed
        ClassCountHook(allow_extra_outputs=True).before_run(fake_runner(model, train=data))
    model.backbone.num_classes = data.num_classes + 2  # evaluating only: the advice is the class names, never this
    with pytest.raises(ClassCountError, match=r"give the data set the model's class names .*test_dataloader\.dataset"):
        ClassCountHook(allow_extra_outputs=True).before_run(fake_runner(model, test=data))


def test_val_classes_must_be_the_train_classes(tmp_path) -> None:
    root = image_tree(image_tree(tmp_path, ('cat', 'dog'), 'train'), ('cat', 'owl'), 'val')
    train, val = ImageFolderDataset(root, 'train', image_size=8), ImageFolderDataset(root, 'val', image_size=8)
    model = SimpleNamespace()  # not a classifier: only the class names are compared
    with pytest.raises(ClassCountError, match=r"val data set has other classes than the train data set \(class 1 is "
                       r"'dog' in one and 'owl' in the other\)"):  # fmt: skip
        ClassCountHook().before_run(fake_runner(model, train=train, val=val))


def test_crop_box_pipeline_trains_a_classifier(tmp_path) -> None:
    cfg = load_config(tiny_config(tmp_path), work_dir=str(tmp_path / 'work'))
    shapes = dict(cfg.train_dataloader.dataset, image_size=40)
    cfg.train_dataloader.dataset = dict(
        type='TransformedDataset', dataset=shapes, transforms=[dict(type='RandomResizedCropBox', size=32)]
    )
    without_validation(cfg)
    runner = Runner.from_cfg(cfg)
    assert set(runner.train_dataloader.dataset[0]) == {'inputs', 'labels', 'crop'}
    runner.train()
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert runner.iter == 2 and len(losses) == 2 and all(0 < v < 10 for v in losses)


def test_crop_is_ignored_and_unknown_batch_keys_are_named() -> None:
    model = MODELS.build(dict(type='ImageClassifier', backbone=dict(model_name='vit_tiny_patch16_224', img_size=16,
                         patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3)))  # fmt: skip
    model.eval()
    batch = Shapes2D(task='position', image_size=16, num_samples=2)
    inputs, labels = torch.stack([batch[i]['inputs'] for i in range(2)]), torch.tensor([0, 1])
    crop = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 2)
    plain = model._run_forward({'inputs': inputs, 'labels': labels}, mode='loss')['loss']
    cropped = model._run_forward({'inputs': inputs, 'labels': labels, 'crop': crop}, mode='loss')['loss']
    assert torch.equal(plain, cropped)
    with pytest.raises(TypeError, match=r"ImageClassifier got batch key\(s\) 'lables'; did you mean 'labels'\?: it "
                       r'takes inputs, labels \(and ignores crop\)'):  # fmt: skip
        model._run_forward({'inputs': inputs, 'lables': labels}, mode='loss')


def test_train_tool_says_it_in_one_line(tmp_path) -> None:
    work = tmp_path / 'work'
    args = ['--work-dir', str(work), '--cfg-options', 'model.backbone.num_classes=5']
    proc = run_tool('tools/train.py', tiny_config(tmp_path), *args, check=False)
    assert proc.returncode == 1 and not list(work.glob('*.pth'))
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: ImageClassifier has 5 outputs but the train data set (Shapes2D) has 27 classes: labels 5..26 have no '
        'output; set model.backbone.num_classes=27'
    )
