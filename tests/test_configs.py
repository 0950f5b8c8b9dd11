"""Every shipped config loads, passes the typo check and builds a model that runs on its own data size."""

import glob
import os

import pytest
import torch
from mmengine.registry import init_default_scope

from vispe.engine.config import load_config
from vispe.registry import DATASETS, MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, 'configs', '*', '*.py')))
CONFIGS = [c for c in CONFIGS if '_base_' not in c]


def test_configs_are_found():
    assert len(CONFIGS) >= 9


@pytest.mark.parametrize('path', CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_config_builds_and_runs(path):
    cfg = load_config(path)
    init_default_scope('vispe')
    model = MODELS.build(cfg.model).eval()
    dataset_cfg = dict(cfg.val_dataloader.dataset, num_samples=2)
    dataset = DATASETS.build(dataset_cfg)
    batch = torch.stack([dataset[i]['inputs'] for i in range(2)])
    logits = model(batch)
    assert logits.shape == (2, dataset.num_classes)
    assert model.backbone.encoding_names == [cfg.model.backbone.encoding]
