"""Every shipped config loads, passes the typo check and builds a model that runs on its own data size."""

import glob
import os

import pytest
import torch
from mmengine.registry import init_default_scope
from torch.utils.data import default_collate

from vispe.datasets.scene2d import as_hw
from vispe.encodings.build import normalize_spec
from vispe.engine.config import load_config
from vispe.registry import DATASETS, MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, 'configs', '*', '*.py')))
CONFIGS = [c for c in CONFIGS if '_base_' not in c]
#: data sets read from the user's disk: the test feeds random images (or clouds) of the config's size instead
ON_DISK = ('ImageFolderDataset', 'CIFAR10Dataset')
ON_DISK_POINTS = ('ModelNet40',)


def test_configs_are_found():
    assert len(CONFIGS) >= 15


def _batch(cfg, num_classes: int):
    """Two validation images (or point clouds) and labels of the config's data set."""
    dataset_cfg = cfg.val_dataloader.dataset
    if dataset_cfg.type in ON_DISK_POINTS:
        return torch.randn(2, dataset_cfg.num_points, 3) * 0.5, torch.tensor([0, num_classes - 1])
    if dataset_cfg.type in ON_DISK:
        return torch.rand(2, 3, *as_hw(dataset_cfg.image_size)) * 2 - 1, torch.tensor([0, num_classes - 1])
    dataset = DATASETS.build(dict(dataset_cfg, num_samples=2))
    assert dataset.num_classes == num_classes
    items = [dataset[i] for i in range(2)]
    return torch.stack([it['inputs'] for it in items]), torch.tensor([it['labels'] for it in items])


@pytest.mark.parametrize('path', CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_config_builds_and_runs(path):
    cfg = load_config(path)
    backbone = cfg.model.backbone
    weights = (backbone.get('pretrained_cfg_overlay') or {}).get('file')
    if backbone.get('pretrained') and weights and not os.path.isfile(weights):
        backbone.pretrained = False  # weights the user supplies (vit_small_dinov3_imagefolder.py): build the model
    init_default_scope('vispe')
    model = MODELS.build(cfg.model).eval()
    if cfg.model.type == 'MultiViewLocalizer':  # multi-view scenes: a batch of two items, a 3D point each
        dataset = DATASETS.build(dict(cfg.val_dataloader.dataset, num_samples=2))
        batch = default_collate([dataset[i] for i in range(2)])
        assert model(**batch, mode='tensor').shape == (2, 3)
        assert torch.isfinite(model(**batch, mode='loss')['loss'])
    elif cfg.model.type == 'DiffusionModel':
        images, labels = _batch(cfg, backbone.num_classes)
        losses = [p['loss'] for p in model(images, labels, mode='predict')]
        assert len(losses) == 2 and all(torch.isfinite(loss) for loss in losses)
    else:
        images, _ = _batch(cfg, backbone.num_classes)
        assert model(images).shape == (2, backbone.num_classes)
    spec = backbone.get('encoding', 'default')
    if spec == 'default':  # the name's own encoding: timm's DINOv3 names carry rope_dinov3
        assert 'dinov3' in backbone.model_name and model.backbone.encoding_names == ['rope_dinov3']
    else:
        assert sorted(model.backbone.encoding_names) == sorted(c['type'] for c in normalize_spec(spec))
