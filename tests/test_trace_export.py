"""Every registered 2D encoding on the timm ViT is traceable and exportable at a dynamic image size.

timm's own contracts (tests/test_models.py): ``test_model_forward_fx`` (an FX graph from torchvision's
``create_feature_extractor`` with timm's leaf modules and functions gives the eager output, bit for bit),
``test_model_backward_fx`` (train mode, every parameter gets a gradient) and ``test_model_forward_fx_torchscript``
(that graph scripts). On top of them, vispe models run at any H x W: the graph is traced once and checked at sizes
other than the one it was traced at (non-square, not 224), and ``torch.export`` with dynamic H and W gives the
eager outputs at sizes other than its example. Tiny models (2 blocks) and small images keep this fast.
"""

from __future__ import annotations

import pytest
import torch
from timm.models import get_notrace_functions, get_notrace_modules
from torch.export import Dim

import vispe
from vispe.encodings.irpe import _BUCKETS

fx_extraction = pytest.importorskip('torchvision.models.feature_extraction')

ENCODINGS = vispe.list_encodings(ndim=2)
#: (H, W) the traced graphs are run at: one non-square, neither the 224 the graph defaults to
SIZES = [(32, 48), (64, 64)]
#: encodings whose FX graph does not script (none: the docs' capabilities table says every 2D encoding's does)
FX_TORCHSCRIPT_FAILS: frozenset = frozenset()
TRACER_KWARGS = dict(
    leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions(), param_shapes_constant=True
)


def tiny_model(name: str, **kwargs) -> torch.nn.Module:
    """vit_tiny with ``name``, 2 blocks, its parameters jittered: zero-initialised tables (irpe) and identity
    mixings (harope) would otherwise contribute nothing, and a wrong trace of them would go unseen."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, depth=2, **kwargs)
    assert len(model.blocks) == 2  # the kwargs reach timm
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def fx_model(model: torch.nn.Module, train: bool = False) -> torch.fx.GraphModule:
    """timm's ``_create_fx_model``: the feature extractor returning the graph's output in train and eval mode."""
    train_nodes, eval_nodes = fx_extraction.get_graph_node_names(model, tracer_kwargs=TRACER_KWARGS)
    return fx_extraction.create_feature_extractor(
        model,
        train_return_nodes=[train_nodes[-1]],
        eval_return_nodes=[eval_nodes[-1]],
        tracer_kwargs=TRACER_KWARGS,
    )


def cached_tables(model: torch.nn.Module) -> list:
    """Everything the encodings' table caches hold (iRPE's shared bucket cache included)."""
    caches = [m._cache for m in model.modules() if hasattr(m, '_cache')] + [_BUCKETS]
    return [
        t
        for cache in caches
        for value in cache._tables.values()
        for t in (value if isinstance(value, tuple) else (value,))
    ]


@pytest.mark.parametrize('name', ENCODINGS)
def test_fx_forward_equals_eager_at_any_size(name: str) -> None:
    model = tiny_model(name).eval()
    with torch.inference_mode():
        graph = fx_model(model)
        assert all(isinstance(t, torch.Tensor) for t in cached_tables(model)), 'a cache holds a traced value'
        for size in SIZES:
            x = torch.randn(2, 3, *size)
            eager = model(x)
            (traced,) = graph(x).values()
            assert torch.equal(traced, eager), f'{name} at {size}: max diff {(traced - eager).abs().max()}'
        plain = torch.fx.symbolic_trace(model)  # without timm's leaf lists too
        x = torch.randn(1, 3, *SIZES[0][::-1])
        assert torch.equal(plain(x), model(x))


@pytest.mark.parametrize('name', ENCODINGS)
def test_fx_backward_reaches_every_parameter(name: str) -> None:
    model = tiny_model(name, num_classes=42).train()
    graph = fx_model(model, train=True)
    (out,) = graph(torch.randn(2, 3, *SIZES[0])).values()
    assert out.shape == (2, 42)
    out.mean().backward()
    missing = [n for n, p in graph.named_parameters() if p.grad is None]
    assert not missing, f'{name}: no gradient for {missing}'
    assert sum(p.numel() for p in graph.parameters()) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('name', ENCODINGS)
def test_fx_graph_scripts(name: str) -> None:
    if name in FX_TORCHSCRIPT_FAILS:
        pytest.xfail(f'{name}: its FX graph calls code TorchScript cannot compile')
    model = tiny_model(name).eval()
    scripted = torch.jit.script(fx_model(model))
    with torch.inference_mode():
        for size in SIZES:
            x = torch.randn(1, 3, *size)
            (out,) = scripted(x).values()
            torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name', ENCODINGS)
def test_export_with_dynamic_height_and_width(name: str) -> None:
    """One program for every size: exported at 32x48, run at the training grid's 224 (where ape_learned's table
    is its own) and at a square size, neither specialised to the example nor to the training size."""
    model = tiny_model(name).eval()
    h, w = Dim('h', min=1, max=32), Dim('w', min=1, max=32)
    program = torch.export.export(model, (torch.randn(1, 3, 32, 48),), dynamic_shapes={'x': {2: 16 * h, 3: 16 * w}})
    assert all(
        isinstance(t, torch.Tensor) and not isinstance(t, torch._subclasses.FakeTensor) for t in cached_tables(model)
    )
    exported = program.module()
    with torch.inference_mode():
        for size in [(224, 224), (64, 96)]:
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(exported(x), model(x), rtol=1e-5, atol=1e-5, msg=f'{name} at {size}')


@pytest.mark.parametrize('name', ENCODINGS)
def test_torch_jit_script_of_the_model(name: str, tmp_path) -> None:
    """timm's test_model_forward_torchscript: ``torch.jit.script(model)`` (through ``__prepare_scriptable__``, the
    model's FX graph) gives the eager outputs at sizes other than 224, and survives torch.jit.save / load."""
    import timm

    with timm.layers.set_layer_config(scriptable=True):
        model = tiny_model(name).eval()
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, str(tmp_path / 'model.pt'))
    loaded = torch.jit.load(str(tmp_path / 'model.pt'))
    with torch.no_grad():
        for size in SIZES:
            x = torch.randn(1, 3, *size)
            assert torch.equal(loaded(x), model(x)), f'{name} at {size}'


def test_torch_jit_script_refuses_what_needs_concrete_sizes() -> None:
    sampled = vispe.create_model(
        'vit_tiny_patch16_224', encoding='rope_axial', depth=1, position_sampler=dict(type='rpe2d', max_grid=(16, 16))
    ).train()
    with pytest.raises(TypeError, match='position sampler .* script the model in eval mode'):
        torch.jit.script(sampled)
    assert isinstance(torch.jit.script(sampled.eval()), torch.jit.ScriptModule)
    strategy = vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', depth=1).eval()
    strategy.blocks[0].attn.pe['rope_axial'].strategy = 'ntk'  # scales computed in Python floats from the sizes
    with pytest.raises(TypeError, match='tracing failed .* drop the non-default resolution strategy'):
        torch.jit.script(strategy)


@pytest.mark.parametrize('name', ['irpe', 'rope_axial'])
def test_tables_cached_in_inference_mode_do_not_reach_training(name: str) -> None:
    """timm's forward_fx runs under ``torch.inference_mode``; tables it caches are inference tensors, which
    autograd refuses to save, so training at the same grid afterwards must get tables of its own."""
    model = tiny_model(name)
    x = torch.randn(2, 3, *SIZES[0])
    with torch.inference_mode():
        model.eval()(x)
    model.train()(x).mean().backward()
    assert model.blocks[0].attn.qkv.weight.grad is not None
