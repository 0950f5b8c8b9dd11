"""Every registered image encoding, through the registry and a timm ViT (picked up automatically for new ones);
the point-cloud ones are exercised the same way in test_point_encodings.py."""

import io

import pytest
import torch

import vispe
from vispe.encodings.build import encoding_class
from vispe.positions import Positions, grid_positions

ENCODINGS = vispe.list_encodings(ndim=2)


def tiny_model(encoding, **overrides):
    from conftest import TINY_VIT

    return vispe.create_model('vit_tiny_patch16_224', encoding=encoding, **{**TINY_VIT, **overrides})


def test_registry_lists_the_foundation_encodings():
    assert {'ape_learned', 'ape_sincos', 'rope_axial', 'rope_mixed'} <= set(ENCODINGS)


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_builds_from_name_and_dict(name):
    cls = encoding_class(name)
    context = dict(dim=96, num_heads=4, ndim=cls.ndims[0], grid_size=(4, 4, 4)[: cls.ndims[0]])
    assert type(vispe.build_encoding(name, **context)) is cls
    assert type(vispe.build_encoding({'type': name}, **context)) is cls


def test_unknown_name_lists_closest():
    with pytest.raises(ValueError, match=r"unknown encoding 'rope_mixd'.*'rope_mixed'"):
        vispe.build_encoding('rope_mixd', dim=64, num_heads=4)
    with pytest.raises(ValueError, match="'rope_axial'"):
        vispe.create_model('vit_tiny_patch16_224', encoding='rope_axal')


def test_unknown_argument_names_the_closest():
    with pytest.raises(TypeError, match="'thetta'; did you mean 'theta'"):
        vispe.build_encoding({'type': 'rope_axial', 'thetta': 10.0}, dim=64, num_heads=4)


@pytest.mark.parametrize('name', ENCODINGS)
def test_forward_backward_fp32_and_bf16(name):
    # average pooling: with cls-token pooling the last block's patch outputs are unused, so a value-term
    # encoding there (lepe) rightly gets no gradient
    model = tiny_model(name, global_pool='avg')
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    out.square().sum().backward()
    for pname, p in model.named_parameters():
        if '.pe.' in f'.{pname}':
            assert p.grad is not None and p.grad.abs().sum() > 0, f'no gradient reaches {pname}'
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out16 = model(x)
    assert out16.dtype == torch.bfloat16 and torch.isfinite(out16.float()).all()
    out16.float().sum().backward()
    assert (out16.float() - out).abs().max() < 0.25  # same function, lower precision


@pytest.mark.parametrize('name', ENCODINGS)
def test_state_dict_round_trip(name):
    model = tiny_model(name).eval()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(123)
    fresh = tiny_model(name).eval()
    x = torch.randn(2, 3, 32, 32)
    assert not torch.allclose(fresh(x), model(x))  # a different init gives a different function
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(fresh(x), model(x))


@pytest.mark.parametrize('name', ENCODINGS)
@pytest.mark.parametrize('size', [(48, 48), (64, 32), (24, 56)])
def test_runs_at_new_resolutions(name, size):
    model = tiny_model(name).eval()
    out = model(torch.randn(1, 3, *size))
    assert out.shape == (1, 5) and torch.isfinite(out).all()
    feats = model.forward_intermediates(torch.randn(1, 3, *size), indices=1, intermediates_only=True)
    assert feats[0].shape == (1, 64, size[0] // 8, size[1] // 8)


def test_no_encoding_tables_in_checkpoints():
    """Grid-derived tables (sin-cos, rotary) are caches, not state."""
    for name in ('ape_sincos', 'rope_axial'):
        model = tiny_model(name)
        model(torch.randn(1, 3, 32, 32))
        assert not [k for k in model.state_dict() if '.pe.' in f'.{k}'], name


def logits(enc, q, k, pos):
    """Patch-to-patch logits (prefix tokens are unrotated, so their logits with patches are absolute)."""
    q2, k2 = enc.rotate(q, k, pos)
    n = pos.num_prefix
    return q2[..., n:, :] @ k2[..., n:, :].transpose(-1, -2)


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed'])
def test_rotary_logits_depend_only_on_offsets(name):
    enc = vispe.build_encoding(name, dim=64, num_heads=4)
    if name == 'rope_mixed':  # a trained-looking, non-axis-aligned frequency set
        torch.nn.init.normal_(enc.freqs, std=0.5)
    q, k = torch.randn(2, 4, 5 + 12, 16), torch.randn(2, 4, 5 + 12, 16)
    base = grid_positions(3, 4, num_prefix=5)
    ref = logits(enc, q, k, base)
    for offset in ([3.0, -7.0], [0.25, 11.5]):
        shifted = Positions(base.coords + torch.tensor(offset), grid=(3, 4), num_prefix=5)
        torch.testing.assert_close(logits(enc, q, k, shifted), ref, atol=1e-4, rtol=1e-4)
    # the property can fail: scaling positions (not a shift) changes the logits
    scaled = Positions(base.coords * 2, grid=(3, 4), num_prefix=5)
    assert (logits(enc, q, k, scaled) - ref).abs().max() > 1e-2


def test_rotary_leaves_prefix_tokens_untouched():
    enc = vispe.build_encoding('rope_axial', dim=64, num_heads=4)
    q, k = torch.randn(1, 4, 2 + 9, 16), torch.randn(1, 4, 2 + 9, 16)
    q2, k2 = enc.rotate(q, k, grid_positions(3, 3, num_prefix=2))
    torch.testing.assert_close(q2[:, :, :2], q[:, :, :2])
    assert not torch.allclose(q2[:, :, 3:], q[:, :, 3:])


def test_rope_axial_frequencies_follow_the_paper():
    enc = vispe.build_encoding('rope_axial', dim=64, num_heads=4)  # d = 16, theta = 100
    d = 16
    for axis in (0, 1):
        torch.testing.assert_close(enc.ladder(axis), torch.tensor([1 / 100 ** (4 * k / d) for k in range(d // 4)]))


def test_ape_sincos_is_a_pure_function_of_position():
    enc = vispe.build_encoding('ape_sincos', dim=64)
    x = torch.zeros(1, 12, 64)
    small = enc.embed(x, grid_positions(3, 4))
    large = enc.embed(torch.zeros(1, 30, 64), grid_positions(5, 6))
    # token (r, c) gets the same vector in both grids
    torch.testing.assert_close(small[0].reshape(3, 4, 64)[2, 3], large[0].reshape(5, 6, 64)[2, 3])


def test_grid_tables_are_cached_per_grid_device_and_dtype():
    """One build per (grid, prefix count, device, dtype): a repeated forward reuses the table, a new grid or a bf16
    input builds its own (in that dtype), and the float32 entry stays."""
    enc = vispe.build_encoding('ape_sincos', dim=16)
    pos = grid_positions(3, 4)
    out32 = enc.embed(torch.zeros(1, 12, 16), pos)
    assert len(enc._cache._tables) == 1
    enc.embed(torch.zeros(1, 12, 16), grid_positions(3, 4))
    assert len(enc._cache._tables) == 1
    out16 = enc.embed(torch.zeros(1, 12, 16, dtype=torch.bfloat16), pos)
    enc.embed(torch.zeros(1, 20, 16), grid_positions(4, 5))
    assert len(enc._cache._tables) == 3 and out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.float(), out32, atol=1e-2, rtol=0)
    rope = vispe.build_encoding('rope_axial', dim=16, num_heads=1)
    q = torch.randn(1, 1, 12, 16)
    rope.rotate(q, q, pos)
    rope.rotate(q.bfloat16(), q.bfloat16(), pos)  # rotary tables are float32 for every input dtype: one entry
    assert len(rope._cache._tables) == 1


@pytest.mark.parametrize('strategy', ['bicubic', 'bilinear', 'nearest'])
def test_ape_learned_resamples_to_new_grids(strategy):
    enc = vispe.build_encoding('ape_learned', dim=8, grid_size=(4, 4))
    enc.strategy = strategy
    table = enc.table((8, 8))
    assert table.shape == (1, 64, 8)
    assert torch.equal(enc.table((4, 4)), enc.pos_embed)
    with pytest.raises(ValueError, match='choose one of'):
        enc.strategy = 'lanczos'


class _EveryHook(vispe.Encoding):
    """A toy encoding overriding every hook of the contract; it records each call (and what the value term got) and
    changes its input a little, so a hook the stack skipped or called twice would show in the output too."""

    def __init__(self, weighted: bool = False) -> None:
        super().__init__()
        self.needs_attn_weights, self.blocks, self.calls = weighted, (0,), []

    def embed(self, x, pos):
        self.calls.append('embed')
        return x + 1

    def rotate(self, q, k, pos):
        self.calls.append('rotate')
        return q * 0.5, k

    def transform_v(self, v, pos):
        self.calls.append('transform_v')
        return v * 2

    def logit_bias(self, q, k, pos):
        self.calls.append('logit_bias')
        return torch.zeros(1, 1, q.shape[-2], k.shape[-2])

    def transform_out(self, out, pos):
        self.calls.append('transform_out')
        return out - 1

    def value_term(self, v, pos, attn=None, rows=slice(None)):
        self.calls.append(('value_term', None if attn is None else tuple(attn.shape), rows))
        return v[..., rows, :] if attn is None else attn @ v

    def after_block(self, x, pos):
        self.calls.append('after_block')
        return x * 3

    def attn_input(self, x, pos, i):
        self.calls.append(('attn_input', i))
        return x + 10 * (i + 1)


@pytest.mark.parametrize('weighted', [False, True])
def test_stack_dispatches_every_declared_hook(weighted):
    from torch import nn

    from vispe.attention import Attention
    from vispe.encodings import HOOK_TABLE, HOOKS, EncodingStack

    assert HOOKS == tuple(HOOK_TABLE) and set(_EveryHook.hooks()) == set(HOOK_TABLE)
    assert {'transform_v', 'transform_out'} <= vispe.encodings.ATTENTION_HOOKS and _EveryHook.per_layer()
    enc, pos = _EveryHook(weighted), grid_positions(2, 2)
    attn = Attention(8, num_heads=2, encodings={'toy': enc})
    attn(torch.randn(1, 4, 8), pos)
    # a weighted term is computed beside the softmax weights (before transform_out); every term is added after it
    term = ('value_term', (1, 2, 4, 4) if weighted else None, slice(None))
    late = ['transform_out', term] if not weighted else [term, 'transform_out']
    assert enc.calls == ['rotate', 'transform_v', 'logit_bias', *late]

    enc.calls.clear()
    stack = EncodingStack(nn.ModuleDict({'toy': enc}))
    x = torch.zeros(1, 4, 8)
    assert torch.equal(stack.embed(x, pos), x + 1) and torch.equal(stack.after_block(0, x + 1, pos), x + 3)
    assert torch.equal(stack.after_block(1, x, pos), x), 'after_block ran after a block its blocks do not name'
    assert enc.calls == ['embed', 'after_block']
    enc.calls.clear()
    assert torch.equal(stack.attn_input(1, x, pos), x + 20) and torch.equal(stack.attn_input_fn(0, pos)(x), x + 10)
    assert enc.calls == [('attn_input', 1), ('attn_input', 0)]
    assert EncodingStack(nn.ModuleDict()).attn_input_fn(0, pos) is None  # no encoding with the hook: nothing passed
    with pytest.raises(ValueError, match="'transform_k' is not an encoding hook"):
        stack.with_hook('transform_k')


def test_stack_chunks_weighted_value_terms_by_rows():
    """Past the byte budget the stack's value term of a weighted encoding gets the weights a slice of rows at a
    time (rows=), and the output is the one-shot output."""
    from vispe.attention import Attention

    enc, pos, x = _EveryHook(weighted=True), grid_positions(2, 2), torch.randn(1, 4, 8)
    attn = Attention(8, num_heads=2, encodings={'toy': enc}).eval()
    with torch.no_grad():
        whole = attn(x, pos)
        attn.bias_budget = 2 * 4 * 4  # one query row of (B=1, H=2, N=4) float32 logits
        enc.calls.clear()
        chunked = attn(x, pos)
    torch.testing.assert_close(chunked, whole)
    assert [c[2] for c in enc.calls if c[0] == 'value_term'] == [slice(i, i + 1) for i in range(4)]


def test_hooks_are_overrides_not_attributes():
    """A hook is a method overriding the base class's: an encoding defining transform_v alone is dispatched, and an
    instance attribute that merely has a hook's name (what a hasattr test would pick up) is not."""
    from vispe.attention import Attention

    class OnlyTransformV(vispe.Encoding):
        def transform_v(self, v, pos):
            return v * 0

    class Rotates(vispe.Encoding):
        def __init__(self) -> None:
            super().__init__()
            self.transform_out = lambda out, pos: out * float('nan')  # not a hook: never called

        def rotate(self, q, k, pos):
            return q, k

    assert OnlyTransformV.hooks() == {'transform_v'} and OnlyTransformV.per_layer()
    x, pos = torch.randn(1, 4, 8), grid_positions(2, 2)
    zeroed = Attention(8, num_heads=2, encodings={'t': OnlyTransformV()})
    assert torch.equal(zeroed(x, pos), zeroed.proj(torch.zeros(1, 4, 8))), 'transform_v was not applied'
    assert Rotates.hooks() == {'rotate'}
    assert not Attention(8, num_heads=2, encodings={'r': Rotates()})(x, pos).isnan().any()


def test_every_declared_hook_is_a_method_of_the_base_class():
    """A hook the base class does not define could never be detected as an override."""
    from vispe.encodings import HOOKS

    for name in HOOKS:
        assert callable(getattr(vispe.Encoding, name)), name


def test_attention_path_follows_the_hooks() -> None:
    """What the capabilities table says of the attention follows from the hooks, for every set of them: model-level
    hooks leave it unchanged, each attention hook is named, a logit bias means SDPA with a mask (FlexAttention only
    with a score term), anything else keeps the fused kernel."""
    from itertools import combinations

    from vispe.encodings import ATTENTION_HOOKS, HOOKS
    from vispe.encodings.base import attention_path

    for hooks in (set(c) for n in range(len(HOOKS) + 1) for c in combinations(HOOKS, n)):
        for score in (False, True):
            methods = {h: lambda self, *args, **kwargs: None for h in hooks}
            probe = type('Probe', (vispe.Encoding,), {**methods, 'has_score_term': score})
            path = attention_path(probe)
            assert ('unchanged' in path) == (not hooks & ATTENTION_HOOKS), path
            assert ('rotated' in path) == ('rotate' in hooks), path
            assert ('v transformed' in path) == ('transform_v' in hooks), path
            assert ('output transformed' in path) == ('transform_out' in hooks), path
            assert ('value term' in path) == ('value_term' in hooks), path
            assert ('attn_mask' in path) == ('with the mask' in path) == ('logit_bias' in hooks), path
            assert ('fused SDPA' in path) == ('logit_bias' not in hooks), path
            assert ('FlexAttention' in path) == (score and 'logit_bias' in hooks), path
            assert 'softmax weights' not in path and 'own rows' not in path, path


@pytest.mark.parametrize('name', vispe.list_encodings())
def test_attention_path_names_the_softmax_weights_where_an_option_needs_them(name: str) -> None:
    """An encoding built with its defaults that needs the softmax weights declares the option that asks for them
    (``attn_weights_option``), and the attention path says so; iRPE on V is the one that does."""
    from vispe.encodings.base import attention_path

    cls = encoding_class(name)
    context = dict(dim=96, num_heads=4, ndim=cls.ndims[0], grid_size=(4, 4, 4)[: cls.ndims[0]], depth=2)
    assert not vispe.build_encoding(name, **context).needs_attn_weights or cls.attn_weights_option
    assert ('softmax weights' in attention_path(cls)) == bool(cls.attn_weights_option)
    assert not cls.attn_weights_option or 'value_term' in cls.hooks()
    assert ('own rows' in attention_path(cls)) == (cls.logit_bias_rows is not vispe.Encoding.logit_bias_rows)
    if name == 'irpe':
        assert cls.attn_weights_option and vispe.build_encoding('irpe:on=qkv', **context).needs_attn_weights
