"""FlexAttention for the logit-bias encodings (``vispe.flex``): every encoding that declares a score term gives,
inside FlexAttention, the output SDPA gives with its materialised bias (iRPE in each mode, side and method, on a grid
and on sampled positions; 2D ALiBi), the kernel rule and its overrides, and the refusals that say why. FlexAttention
has no backward on CPU (torch 2.14): the gradients are compared on a GPU by the GPU-marked test at the end."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_VIT
from torch._dynamo.utils import counters

import vispe
from vispe.attention import set_attention_kernel
from vispe.flex import FLEX_MIN_TOKENS, choose_kernel, flex_attend
from vispe.positions import grid_positions

#: (encoding, options): every score-term encoding and every option that changes its term
CASES = [
    ('alibi2d', {}),
    ('irpe', {}),
    ('irpe', dict(on='q')),
    ('irpe', dict(on='qk', method='cross')),
    ('irpe', dict(on='qk', method='euclidean', shared_heads=False)),
    ('irpe', dict(method='quant')),
    ('irpe', dict(mode='bias')),
    ('irpe', dict(mode='bias', method='cross', shared_heads=False)),
]
B, H, D = 2, 4, 32


def encoding_and_inputs(name: str, options: dict, device: str = 'cpu', sampled: bool = False):
    torch.manual_seed(0)
    enc = vispe.build_encoding(dict(type=name, **options), dim=D, num_heads=H).to(device)
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_()  # iRPE's tables start at 0, which would compare nothing
    pos = grid_positions(5, 6, num_prefix=1, device=torch.device(device))
    if sampled:  # per-sample positions: (B, N, 2) coordinates, ids (B, N, N)
        pos = vispe.positions.Positions(coords=pos.coords + torch.rand(B, 30, 2, device=device), num_prefix=1)
    q, k, v = (torch.randn(B, H, 31, D // H, device=device) for _ in range(3))
    return enc, pos, q, k, v


@pytest.mark.parametrize('sampled', [False, True])
@pytest.mark.parametrize(('name', 'options'), CASES)
def test_score_term_inside_flex_equals_sdpa_with_the_bias(name: str, options: dict, sampled: bool) -> None:
    enc, pos, q, k, v = encoding_and_inputs(name, options, sampled=sampled)
    assert enc.has_score_term
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=enc.logit_bias(q, k, pos))
        got = flex_attend(q, k, v, [enc.score_term(q, k, pos)])
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize('name', ['irpe', 'alibi2d', 'irpe+alibi2d'])
def test_a_model_on_flex_equals_the_model_on_sdpa(name: str) -> None:
    """Whole ViT in evaluation: attention_kernel='flex' (every layer's terms summed in one score_mod) against 'sdpa'."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, **TINY_VIT).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if 'tables' in n:
                p.normal_()
        x = torch.randn(2, 3, 32, 32)
        assert set_attention_kernel(model, 'sdpa') == TINY_VIT['depth']
        expected = model(x)
        set_attention_kernel(model, 'flex')
        torch.testing.assert_close(model(x), expected, atol=2e-5, rtol=2e-5)


def test_the_rule_and_its_overrides() -> None:
    """'auto' takes FlexAttention on CUDA from FLEX_MIN_TOKENS tokens and SDPA otherwise; 'sdpa' always SDPA; 'flex'
    wherever it can run, and one line saying why where it cannot. A config reaches it through the ViT."""
    cuda = SimpleNamespace(is_cuda=True, shape=(2, 4, FLEX_MIN_TOKENS, 8))
    short = SimpleNamespace(is_cuda=True, shape=(2, 4, FLEX_MIN_TOKENS - 1, 8))
    cpu = SimpleNamespace(is_cuda=False, shape=(2, 4, 4 * FLEX_MIN_TOKENS, 8))
    assert [choose_kernel('auto', t, None) for t in (cuda, short, cpu)] == ['flex', 'sdpa', 'sdpa']
    assert choose_kernel('auto', cuda, 'attention dropout is on') == 'sdpa'
    assert choose_kernel('auto', short, None, mixed=True) == 'flex'  # a mixed batch: its BlockMask at any size
    assert choose_kernel('auto', cpu, None, mixed=True) == 'sdpa'
    assert choose_kernel('sdpa', cuda, None) == 'sdpa' and choose_kernel('flex', cpu, None) == 'flex'
    with pytest.raises(ValueError, match="'flex' cannot run this call: an encoding needs the softmax weights"):
        choose_kernel('flex', cuda, 'an encoding needs the softmax weights (iRPE on V)')
    model = vispe.create_model('vit_tiny_patch16_224', encoding='irpe', attention_kernel='sdpa', **TINY_VIT)
    assert {blk.attn.attention_kernel for blk in model.blocks} == {'sdpa'}
    with pytest.raises(ValueError, match=r"attention_kernel must be one of \['auto', 'sdpa', 'flex'\], got 'fast'"):
        vispe.create_model('vit_tiny_patch16_224', encoding='irpe', attention_kernel='fast', **TINY_VIT)


@pytest.mark.parametrize('mode', ['pad', 'pack'])
@pytest.mark.parametrize('name', vispe.list_encodings(ndim=2))
def test_a_mixed_batch_on_a_block_mask_equals_its_dense_mask(name: str, mode: str) -> None:
    """Images of three sizes in one batch, every image encoding: FlexAttention with the layout's BlockMask (plus the
    biases' score terms) gives every image the tokens SDPA with the dense (B, 1, T, T) mask gives it, and with it
    the mixed-batch property tests' guarantee (each image as if alone, tests/test_mixed_sizes.py)."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, mixed_sizes=mode, **TINY_VIT).eval()
    images = [torch.randn(3, 32, 32), torch.randn(3, 16, 24), torch.randn(3, 24, 16), torch.randn(3, 8, 8)]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if 'tables' in n:
                p.normal_()
        set_attention_kernel(model, 'sdpa')
        expected = model.forward_features(images)
        set_attention_kernel(model, 'flex')
        got = model.forward_features(images)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    ('encoding', 'message'),
    [
        ('irpe:on=kv', 'needs the softmax weights'),
        ('rope_axial+irpe', None),  # a rotary encoding beside the bias one: flex still serves it
        ('irpe', 'no backward on CPU'),
    ],
)
def test_flex_refuses_what_it_cannot_run_and_says_why(encoding: str, message: str | None) -> None:
    model = vispe.create_model('vit_tiny_patch16_224', encoding=encoding, attention_kernel='flex', **TINY_VIT)
    x = torch.randn(2, 3, 32, 32)
    if message is None:
        with torch.no_grad():
            model.eval()(x)
        return
    if 'backward' in message:
        model.train()
    else:
        model.eval()
    with pytest.raises(ValueError, match=f"attention_kernel 'flex' cannot run this call: .*{message}"):
        model(x)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device (tools/gpu_check.sh runs these)')
@pytest.mark.parametrize(('name', 'options'), CASES)
def test_flex_equals_sdpa_forward_and_backward_on_cuda(name: str, options: dict) -> None:
    """On the GPU FlexAttention has a backward: outputs and the gradients of q, k, v and the encoding's tables."""
    results = []
    for use_flex in (False, True):
        enc, pos, q, k, v = encoding_and_inputs(name, options, device='cuda')
        for t in (q, k, v):
            t.requires_grad_()
        if use_flex:
            out = flex_attend(q, k, v, [enc.score_term(q, k, pos)])
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=enc.logit_bias(q, k, pos))
        out.square().sum().backward()
        grads = [t.grad for t in (q, k, v)] + [p.grad for p in enc.parameters()]
        results.append((out.detach(), grads))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-4, rtol=1e-4)
    for got, expected in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize('name', ['irpe', 'alibi2d'])
def test_a_compiled_model_on_flex_is_one_graph_equal_to_eager(name: str) -> None:
    """Inside torch.compile dynamo takes FlexAttention with the score terms as one graph (no break, no complex)."""
    from test_compile import GraphCheck

    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, attention_kernel='flex', **TINY_VIT).eval()
    x = torch.randn(2, 3, 32, 32)
    torch._dynamo.reset()
    check = GraphCheck()
    with torch.no_grad():
        expected = model(x)
        for _ in range(2):
            torch.testing.assert_close(torch.compile(model, backend=check)(x), expected, atol=1e-5, rtol=1e-5)
    assert check.graphs == 1


@pytest.mark.parametrize(
    ('name', 'mode', 'kernel'),
    [(name, 'pad', 'flex') for name in vispe.list_encodings(ndim=2)]
    + [('irpe', 'pack', 'flex'), ('rope_axial', 'pack', 'flex'), ('irpe', 'pad', 'sdpa'), ('lepe', 'pack', 'sdpa')],
)
def test_a_mixed_batch_through_compiled_blocks_is_one_graph(name: str, mode: str, kernel: str) -> None:
    """Blocks compiled one by one (the benchmarks' default scope) on a mixed batch: every block reuses the first
    block's graph (the layout's tensors and BlockMask are built before the blocks, ``TokenLayout.prepare``), with no
    graph break and no complex value, and every image gets what the eager model gives it."""
    from test_compile import GraphCheck

    from vispe.bench.timing import compile_module

    model = vispe.create_model('vit_tiny_patch16_224', encoding=name, mixed_sizes=mode, **TINY_VIT).eval()
    set_attention_kernel(model, kernel)
    batches = [
        [torch.randn(3, 32, 32), torch.randn(3, 16, 24), torch.randn(3, 8, 8)],
        [torch.randn(3, 24, 16), torch.randn(3, 32, 16)],
    ]
    with torch.no_grad():
        expected = [model.forward_features(images) for images in batches]
    torch._dynamo.reset()
    counters.clear()
    check = GraphCheck()
    compile_module(model, 'blocks', backend=check)
    graphs = []
    with torch.no_grad():
        for images, tokens in zip(batches, expected):
            for got, want in zip(model.forward_features(images), tokens):
                torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
            graphs.append(check.graphs)
    assert graphs[0] == 1, f'{graphs[0]} graphs for the first batch: a block recompiled'
    assert not counters['graph_break'] and not check.complex_nodes
