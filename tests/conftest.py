import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Small, fast settings shared by the tests: 2 blocks, 32 px images, 8 px patches (a 4x4 grid).
TINY_VIT = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiny_vit_kwargs():
    return dict(TINY_VIT)


def train_in_process(config: str, work_dir: str):
    """Train ``config`` with mmengine's Runner in this process; returns (config path, path of epoch_1.pth, the
    model's initial state dict, the runner). Used by the tools tests' module fixtures."""
    from mmengine.runner import Runner

    from vispe.engine.config import load_config

    cfg = load_config(config, work_dir=work_dir)
    runner = Runner.from_cfg(cfg)
    init = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    return cfg.filename, os.path.join(work_dir, 'epoch_1.pth'), init, runner


def changed_keys(init: dict, state: dict) -> list:
    """Names of the state-dict entries that training changed."""
    return [k for k in init if not torch.equal(init[k], state[k].to(init[k].dtype))]
