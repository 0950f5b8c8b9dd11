"""torch.compile: the forward of every registered encoding, in the backbone that serves it (two blocks), compiles as
one graph with no complex dtype in it, is not recompiled from one call (or block) to the next, and matches the eager
model forward and backward; Inductor's CPU backend on the encodings that broke it before (complex rotations, iRPE's
per-block recompiles) and on the learned rotations."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from conftest import TINY_VIT
from torch._dynamo.utils import counters

import vispe
from vispe import geometry as G
from vispe.backbones import MultiViewTransformer, PointTransformer, VideoTransformer
from vispe.encodings.build import encoding_class


def video_model_and_inputs(name):
    """The tiny space-time ViT (two blocks) with encoding ``name`` and a batch of clips (4 frames of 16 px)."""
    args = dict(num_classes=5, img_size=16, num_frames=4, patch_size=4, embed_dim=48, depth=2, num_heads=2)
    return VideoTransformer(encoding=name, **args), (torch.randn(2, 3, 4, 16, 16),)


def model_and_inputs(name):
    """The tiny backbone (two blocks) that serves encoding ``name`` (or a config dict of one) and a batch for it."""
    cls = encoding_class(name if isinstance(name, str) else name['type'])
    if cls.needs_cameras:
        B, V = 2, 2
        poses = G.look_at(torch.randn(B, V, 3) * 3, torch.zeros(B, V, 3))
        K = G.intrinsics(torch.full((B, V), 20.0), 16, 16)
        model = MultiViewTransformer(encoding=name, img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2)
        return model, (torch.rand(B, V, 3, 16, 16), K, poses)
    if 2 not in cls.ndims and cls.needs_grid:  # video token grids only
        return video_model_and_inputs(name)
    if 2 not in cls.ndims:
        args = dict(num_classes=5, num_groups=8, group_size=8, embed_dim=48, depth=2, num_heads=2)
        model = PointTransformer(encoding=name, **args)
        return model, (torch.rand(2, 64, 3),)
    return vispe.create_model('vit_tiny_patch16_224', encoding=name, **TINY_VIT), (torch.randn(2, 3, 32, 32),)


class GraphCheck:
    """A torch.compile backend that counts the graphs dynamo hands it (a graph break or a recompilation adds one) and
    collects the nodes whose values are complex, then compiles each graph with ``backend``."""

    def __init__(self, backend: str = 'aot_eager') -> None:
        self.graphs = 0
        self.complex_nodes: list[str] = []
        self.backend = dynamo.lookup_backend(backend)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        for node in gm.graph.nodes:
            value = node.meta.get('example_value')
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, torch.Tensor) and v.is_complex() for v in values):
                self.complex_nodes.append(node.format_node())
        return self.backend(gm, example_inputs)


def train_step(model, inputs, seed: int = 0):
    """Output and parameter gradients of one forward + backward (the seed fixes training-time draws)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(*inputs)
    out.float().square().mean().backward()
    grads = {n.removeprefix('_orig_mod.'): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def assert_same_step(eager, compiled, tol: float) -> None:
    """Outputs within ``tol``; gradients within ``tol`` times the largest gradient of the model (a gradient that sums
    terms cancelling to about 0, e.g. iRPE's prefix bucket, where the rows of the softmax Jacobian sum to 0, is only
    as exact as those terms)."""
    torch.testing.assert_close(compiled[0], eager[0], atol=tol, rtol=tol)
    assert compiled[1].keys() == eager[1].keys()
    scale = max(grad.abs().max() for grad in eager[1].values()).clamp_min(1e-12)
    for name, grad in eager[1].items():
        torch.testing.assert_close(
            compiled[1][name] / scale, grad / scale, atol=tol, rtol=0, msg=lambda m, name=name: f'{name}: {m}'
        )


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_every_encoding_compiles_as_one_graph_that_matches_eager(name: str) -> None:
    """Two training steps: one graph in all (no break, no recompilation from block to block or call to call), no
    complex dtype in it, and the compiled step's output and gradients equal the eager one's (AOTAutograd)."""
    check_one_graph(name, *model_and_inputs(name))


#: the video encodings that also serve images (above, on the ViT), here in their 3D form on clips
VIDEO_FORMS = sorted(set(vispe.list_encodings(ndim=3)) & set(vispe.list_encodings(ndim=2)))


@pytest.mark.parametrize('name', VIDEO_FORMS)
def test_video_forms_compile_as_one_graph_that_matches_eager(name: str) -> None:
    check_one_graph(name, *video_model_and_inputs(name))


def check_one_graph(name: str, model, inputs) -> None:
    """``test_every_encoding_compiles_as_one_graph_that_matches_eager``'s checks on ``model``."""
    model.train()
    dynamo.reset()
    counters.clear()
    check = GraphCheck()
    compiled = torch.compile(model, backend=check)
    for seed in (0, 1):
        eager = train_step(model, inputs, seed)
        assert_same_step(eager, train_step(compiled, inputs, seed), tol=1e-4)
    assert check.graphs == 1, f'{name}: {check.graphs} graphs (graph breaks or recompilations)'
    assert not counters['graph_break'], f'{name}: dynamo counted graph breaks: {dict(counters["graph_break"])}'
    assert not check.complex_nodes, f'{name}: complex values in the compiled graph: {check.complex_nodes[:3]}'


@pytest.mark.parametrize('name', ['rope_mixed', 'irpe', 'comrope_ap', 'harope', 'string_cayley', 'liere'])
def test_inductor_cpu_compiles_once_and_matches_eager(name: str) -> None:
    """Inductor's CPU backend on the rotation that used to be complex (rope_mixed), iRPE (recompiled per block before
    its tables stopped being cached under compile) and the learned rotations: one graph for two steps, and the
    output and gradients within bf16 tolerance of eager."""
    model, inputs = model_and_inputs(name)
    model.train()
    dynamo.reset()
    counters.clear()
    check = GraphCheck('inductor')
    compiled = torch.compile(model, backend=check)
    for seed in (0, 1):
        eager = train_step(model, inputs, seed)
        assert_same_step(eager, train_step(compiled, inputs, seed), tol=1e-3)
    assert check.graphs == 1, f'{name}: {check.graphs} graphs (graph breaks or recompilations)'
    assert not counters['graph_break'] and counters['stats']['unique_graphs'] == 1, dict(counters['stats'])


@pytest.mark.parametrize('name', ['rope_axial', 'irpe', 'comrope_ap'])
def test_blocks_compiled_one_by_one_share_one_graph(name: str) -> None:
    """Regional compilation (``compile_module(model, 'blocks')``, what tools/gpu_check.sh times): the three blocks
    share one graph (nothing in a block guards on which block it is), and the steps equal an eager copy's."""
    import copy

    from vispe.bench.timing import compile_module

    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, **{**TINY_VIT, 'depth': 3}).train()
    eager_model = copy.deepcopy(model)
    dynamo.reset()
    check = GraphCheck()
    compile_module(model, 'blocks', backend=check)
    inputs = (torch.randn(2, 3, 32, 32),)
    for seed in (0, 1):
        assert_same_step(train_step(eager_model, inputs, seed), train_step(model, inputs, seed), tol=1e-4)
    assert check.graphs == 1, f'{name}: {check.graphs} graphs for three blocks (a recompilation per block?)'
    with pytest.raises(ValueError, match="compile scope must be one of \\('model', 'blocks'\\)"):
        compile_module(model, 'layers')


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


@pytest.mark.parametrize(
    'config',
    [
        dict(type='ape_learned', lape=True),
        dict(type='ape_sincos', lape=True),
        dict(type='lff', lape=True),
        dict(type='ape_learned', strategy='grid_sample'),
    ],
    ids=['ape_learned-lape', 'ape_sincos-lape', 'lff-lape', 'ape_learned-grid_sample-fuzzy'],
)
def test_lape_and_fuzzy_compile_as_one_graph_that_matches_eager(config) -> None:
    """LaPE's per-block attn_input hook and ape_learned's grid_sample lookup under the fuzzy sampler (training): one
    graph for two steps (no break at the hook, no recompile per block or per draw), equal to eager."""
    model, inputs = model_and_inputs(config)
    if config.get('strategy') == 'grid_sample':
        model.position_sampler = vispe.positions.build_position_sampler(dict(type='fuzzy'))
    model.train()
    dynamo.reset()
    counters.clear()
    check = GraphCheck()
    compiled = torch.compile(model, backend=check)
    for seed in (0, 1):
        eager = train_step(model, inputs, seed)
        assert_same_step(eager, train_step(compiled, inputs, seed), tol=1e-4)
    assert check.graphs == 1, f'{config}: {check.graphs} graphs (graph breaks or recompilations)'
    assert not counters['graph_break'], f'{config}: graph breaks: {dict(counters["graph_break"])}'
