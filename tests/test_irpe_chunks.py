"""Query chunking of bias encodings (vispe/attention.py): when the (B, H, N, N) logit bias would pass the byte budget,
attention runs a slice of queries at a time; the result and its gradients equal the one-shot path, and no tensor
of the chunked pass holds more than one chunk of bias rows."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_VIT
from torch.utils._python_dispatch import TorchDispatchMode

import vispe
import vispe.attention as attention_module
from vispe.attention import Attention, set_bias_budget
from vispe.encodings.irpe import METHODS
from vispe.positions import Positions, grid_positions

#: (mode, on) pairs iRPE accepts
MODES_ON = [('bias', 'k'), ('contextual', 'k'), ('contextual', 'q'), ('contextual', 'v'), ('contextual', 'qkv')]
DIM, HEADS, GRID, PREFIX = 32, 4, (3, 5), 1  # a non-square grid with a cls token: N = 16
N = PREFIX + GRID[0] * GRID[1]


def irpe_attention(method: str, mode: str, on: str, shared_heads: bool) -> Attention:
    enc = vispe.build_encoding(
        dict(type='irpe', method=method, mode=mode, on=on, shared_heads=shared_heads), dim=DIM, num_heads=HEADS
    )
    for table in enc.tables.values():
        torch.nn.init.normal_(table)
    return Attention(DIM, HEADS, qkv_bias=True, encodings={'irpe': enc})


def rows_budget(attn: Attention, x: torch.Tensor, rows: int) -> int:
    """The byte budget that fits ``rows`` query rows of the (B, H, rows, N) bias of ``x``, and no more."""
    return rows * x.shape[0] * attn.num_heads * x.shape[1] * x.element_size()


class QueryRows:
    """Records the query rows of every SDPA / materialised-softmax call (the attention's two paths)."""

    def __init__(self, monkeypatch) -> None:
        self.rows: list[int] = []
        sdpa, weights = F.scaled_dot_product_attention, Attention.attention_weights

        def recording_sdpa(q, k, v, *args, **kwargs):
            self.rows.append(q.shape[-2])
            return sdpa(q, k, v, *args, **kwargs)

        def recording_weights(module, q, k, *args, **kwargs):
            self.rows.append(q.shape[-2])
            return weights(module, q, k, *args, **kwargs)

        monkeypatch.setattr(F, 'scaled_dot_product_attention', recording_sdpa)
        monkeypatch.setattr(Attention, 'attention_weights', recording_weights)


def forward_and_grads(attn: Attention, x: torch.Tensor, pos: Positions):
    x = x.detach().requires_grad_()
    attn.zero_grad()
    out = attn(x, pos)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), x.grad, {n: p.grad.clone() for n, p in attn.named_parameters()}


def case_id(value) -> str:
    return '-'.join(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(('method', 'mode_on'), list(itertools.product(METHODS, MODES_ON)), ids=case_id)
def test_chunked_equals_one_shot(method, mode_on, monkeypatch):
    mode, on = mode_on
    attn = irpe_attention(method, mode, on, shared_heads=method in ('product', 'euclidean'))
    x, pos = torch.randn(2, N, DIM), grid_positions(*GRID, num_prefix=PREFIX)
    calls = QueryRows(monkeypatch)
    out, x_grad, grads = forward_and_grads(attn, x, pos)
    assert calls.rows == [N]  # the default budget keeps small inputs on the one-shot path
    calls.rows.clear()
    attn.bias_budget = rows_budget(attn, x, 5)
    chunked, chunked_x_grad, chunked_grads = forward_and_grads(attn, x, pos)
    assert calls.rows[:4] == [5, 5, 5, 1]  # 16 queries: three chunks of 5 and one of 1 (then the recomputation)
    torch.testing.assert_close(chunked, out)
    torch.testing.assert_close(chunked_x_grad, x_grad)
    for name, grad in grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, pos), out)


@pytest.mark.parametrize('on', ['qk', 'qkv'])
def test_chunked_per_sample_positions_equal_one_shot(on, monkeypatch):
    """rpe2d's per-sample coordinates give (B, N, N) bucket tables; their rows are chunked the same way."""
    attn = irpe_attention('cross', 'contextual', on, shared_heads=False)
    coords = torch.stack([grid_positions(*GRID).coords, grid_positions(*GRID).coords * 1.7])
    pos = Positions(coords, grid=GRID, num_prefix=PREFIX)
    x, calls = torch.randn(2, N, DIM), QueryRows(monkeypatch)
    with torch.no_grad():
        out = attn(x, pos)
        attn.bias_budget = rows_budget(attn, x, 3)
        torch.testing.assert_close(attn(x, pos), out)
    assert calls.rows == [N, 3, 3, 3, 3, 3, 1]


@pytest.mark.parametrize('mask_kind', ['bool', 'float'])
def test_a_mask_of_the_caller_combines_with_the_bias(mask_kind):
    """A boolean attn_mask (True: attend) added to a float bias once turned True into +1.0 on the logits; it now
    means what SDPA means by it, one-shot and chunked alike."""
    attn = irpe_attention('product', 'contextual', 'qkv', shared_heads=True)
    x, pos = torch.randn(2, N, DIM), grid_positions(*GRID, num_prefix=PREFIX)
    keep = torch.rand(N, N) > 0.3
    keep[:, 0] = True  # every query keeps a key
    as_float = torch.zeros(N, N).masked_fill(~keep, float('-inf'))
    mask = keep if mask_kind == 'bool' else as_float
    with torch.no_grad():
        # the reference: the same attention with the mask folded in by hand
        q, k, v = attn.qkv(x).reshape(2, N, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        enc = attn.pe['irpe']
        logits = (q @ k.transpose(-1, -2)) * (DIM // HEADS) ** -0.5 + enc.logit_bias(q, k, pos) + as_float
        weights = logits.softmax(-1)
        ref = weights @ v + enc.value_term(v, pos, weights)
        ref = attn.proj(ref.transpose(1, 2).reshape(2, N, DIM))
        torch.testing.assert_close(attn(x, pos, attn_mask=mask), ref)
        attn.bias_budget = rows_budget(attn, x, 4)
        torch.testing.assert_close(attn(x, pos, attn_mask=mask), ref)


def test_causal_attention_with_a_bias_is_chunked_like_one_shot():
    attn = irpe_attention('product', 'contextual', 'k', shared_heads=True)
    x, pos = torch.randn(2, N, DIM), grid_positions(*GRID, num_prefix=PREFIX)
    with torch.no_grad():
        q, k, v = attn.qkv(x).reshape(2, N, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        bias = attn.pe['irpe'].logit_bias(q, k, pos).masked_fill(~causal, float('-inf'))
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        ref = attn.proj(ref.transpose(1, 2).reshape(2, N, DIM))
        torch.testing.assert_close(attn(x, pos, is_causal=True), ref)
        attn.bias_budget = rows_budget(attn, x, 6)
        torch.testing.assert_close(attn(x, pos, is_causal=True), ref)


def test_query_rows_follow_the_byte_budget(monkeypatch):
    """The module default chunks the 8x shapes2d forward (a 64 x 64 grid + cls, batch 128, 4 heads) and leaves
    the training size (8 x 8 + cls) on the one-shot path; an instance's bias_budget overrides the default."""
    attn = Attention(64, 4)
    big, small = torch.empty(128, 4, 4097, 16), torch.empty(128, 4, 65, 16)
    rows = attn.query_rows(big, big)
    assert 1 <= rows < 4097 and rows * 128 * 4 * 4097 * 4 <= attention_module.BIAS_BUDGET_BYTES
    assert attn.query_rows(small, small) == 65
    monkeypatch.setattr(attention_module, 'BIAS_BUDGET_BYTES', 128 * 4 * 65 * 4 * 10)
    assert attn.query_rows(small, small) == 10
    attn.bias_budget = 1  # less than one row: still one row at a time
    assert attn.query_rows(small, small) == 1
    attn.bias_budget = None
    assert attn.query_rows(small, small) == 10


class LargestTensor(TorchDispatchMode):
    """The largest number of elements any operator returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


@pytest.mark.parametrize(
    ('spec', 'grad'),
    [
        ('irpe', False),
        ('irpe', True),
        (dict(type='irpe', on='qkv'), False),
        (dict(type='irpe', on='qkv'), True),
        # without autograd SDPA broadcasts a (1, 1, N, N) bias itself; with it, the math backend expands the logits
        (dict(type='irpe', mode='bias'), True),
    ],
)
def test_no_tensor_of_a_chunked_pass_holds_the_whole_bias(spec, grad):
    """A ViT with iRPE at 4x its training grid, forward (and backward): one-shot, some tensor holds all B x H x N x N
    logits; chunked to 8 query rows, none holds more than those rows or a tensor linear in N (the qkv projection,
    the input image, the (B, H, N, buckets) key lookup of iRPE on Q)."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding=spec, **TINY_VIT).eval()
    x = torch.randn(2, 3, 128, 128)  # a 16 x 16 grid + cls: N = 257
    n, heads = 257, model.blocks[0].attn.num_heads

    def run():
        with torch.set_grad_enabled(grad), LargestTensor() as largest:
            out = model(x)
            if grad:
                out.sum().backward()
        return out.detach(), largest.numel

    out, one_shot = run()
    assert one_shot >= 2 * heads * n * n
    assert set_bias_budget(model, 8 * 2 * heads * n * 4) == len(model.blocks)
    chunked, largest = run()
    torch.testing.assert_close(chunked, out)
    dim, buckets = model.embed_dim, model.blocks[0].attn.pe['irpe'].num_buckets
    linear_in_n = max(2 * n * 3 * dim, x.numel(), 2 * heads * n * buckets)
    assert largest <= max(8 * 2 * heads * n, linear_in_n) < one_shot / 4


def test_chunks_inside_gradient_checkpointed_blocks_give_the_same_gradients():
    """Chunks under autograd are checkpointed; inside a ViT whose blocks are checkpointed too, the nested
    recomputation still gives the one-shot gradients."""
    model = vispe.create_model('vit_tiny_patch16_224', encoding=dict(type='irpe', on='qkv'), **TINY_VIT)
    x = torch.randn(2, 3, 64, 64)  # N = 65

    def grads(budget, checkpointed):
        model.zero_grad()
        model.set_grad_checkpointing(checkpointed)
        set_bias_budget(model, budget)
        model(x).square().sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    reference = grads(None, False)
    assert any('irpe' in name for name in reference)
    for checkpointed in (False, True):
        chunked = grads(7 * 2 * 4 * 65 * 4, checkpointed)  # 7 query rows at a time
        assert chunked.keys() == reference.keys()
        for name, grad in reference.items():
            torch.testing.assert_close(chunked[name], grad, msg=name)
