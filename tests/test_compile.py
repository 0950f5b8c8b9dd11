"""torch.compile: the forward of every registered encoding, in the backbone that serves it, traces as one graph
(``torch._dynamo.explain`` on CPU), so compiled training never falls back to eager in the middle of a model."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from conftest import TINY_VIT

import vispe
from vispe import geometry as G
from vispe.backbones import MultiViewTransformer, PointTransformer
from vispe.encodings.build import encoding_class


def model_and_inputs(name):
    """The tiny backbone that serves encoding ``name`` (or a config dict of one) and a batch for it."""
    cls = encoding_class(name if isinstance(name, str) else name['type'])
    if cls.needs_cameras:
        B, V = 2, 2
        poses = G.look_at(torch.randn(B, V, 3) * 3, torch.zeros(B, V, 3))
        K = G.intrinsics(torch.full((B, V), 20.0), 16, 16)
        model = MultiViewTransformer(encoding=name, img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2)
        return model, (torch.rand(B, V, 3, 16, 16), K, poses)
    if 2 not in cls.ndims:
        args = dict(num_classes=5, num_groups=8, group_size=8, embed_dim=48, depth=1, num_heads=2)
        model = PointTransformer(encoding=name, **args)
        return model, (torch.rand(2, 64, 3),)
    return vispe.create_model('vit_tiny_patch16_224', encoding=name, **TINY_VIT), (torch.randn(2, 3, 32, 32),)


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_forward_has_no_graph_break(name: str) -> None:
    model, inputs = model_and_inputs(name)
    dynamo.reset()
    explanation = dynamo.explain(model.eval())(*inputs)
    reasons = sorted({str(b.reason).splitlines()[0] for b in explanation.break_reasons})
    assert explanation.graph_break_count == 0, f'{name}: {reasons}'
    assert explanation.graph_count == 1


def test_train_tool_compiles_the_backbone_and_keeps_checkpoint_keys(tmp_path) -> None:
    """tools/train.py --compile: two compiled iterations on CPU; the checkpoint loads into a plain model."""
    from test_tools import run_tool, tiny_config

    from vispe.engine.checkpoint import load_checkpoint, read_checkpoint
    from vispe.engine.config import load_config
    from vispe.registry import MODELS

    config = tiny_config(tmp_path, encoding='rope_axial')
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', config, '--work-dir', str(work), '--compile', timeout=600)
    assert 'Epoch(train) [1][2/2]' in proc.stdout + proc.stderr
    state = read_checkpoint(str(work / 'epoch_1.pth'))['state_dict']
    assert state and not [k for k in state if '_orig_mod' in k]
    plain = MODELS.build(load_config(config).model)
    load_checkpoint(str(work / 'epoch_1.pth'), plain)  # strict: every key matches an uncompiled model
    assert torch.equal(
        plain.state_dict()['backbone.blocks.0.attn.qkv.weight'], state['backbone.blocks.0.attn.qkv.weight']
    )


@pytest.mark.slow
@pytest.mark.parametrize('family', ['dit', 'point', 'camera'])
def test_runner_trains_compiled(family: str, tmp_path) -> None:
    """--compile for the other backbone families (the ViT goes through tools/train.py above): two Runner iterations
    with the backbone compiled, a finite loss, and weights that move."""
    from conftest import changed_keys
    from mmengine.runner import Runner
    from test_amp import CONFIGS

    from vispe.engine.config import compile_backbone, load_config, without_validation

    cfg = load_config(CONFIGS[family](tmp_path), work_dir=str(tmp_path / 'work'))
    without_validation(cfg)  # training is what is tested
    runner = Runner.from_cfg(cfg)
    compile_backbone(runner.model)
    init = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    assert runner.model.backbone._compiled_call_impl is not None
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) and torch.isfinite(torch.as_tensor(losses)).all()
    assert changed_keys(init, runner.model.state_dict())
