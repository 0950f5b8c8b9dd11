"""iRPE (vispe/encodings/irpe.py) against hand-computed buckets and naive double-loop references."""

import copy
import math

import pytest
import torch

import vispe
from vispe.encodings.irpe import IRPE, bucket_ids, num_buckets, piecewise_index
from vispe.positions import Positions, grid_positions

RATIO = 1.9
ALPHA, BETA, GAMMA = RATIO, 2 * RATIO, 8 * RATIO  # 1.9, 3.8, 15.2: b = int(beta) = 3


def g(x):
    """piecewise_index at ratio 1.9, in Python floats."""
    return piecewise_index(torch.tensor([float(x)]), ALPHA, BETA, GAMMA).item()


def log_region(x, alpha=ALPHA, beta=BETA, gamma=GAMMA):
    """alpha + ln(|x| / alpha) / ln(gamma / alpha) * (beta - alpha), unrounded."""
    return alpha + math.log(abs(x) / alpha) / math.log(gamma / alpha) * (beta - alpha)


def g_ref(x, alpha=ALPHA, beta=BETA, gamma=GAMMA):
    """The paper's g written out independently of the implementation."""
    if abs(x) <= alpha:
        return round(x)
    return int(math.copysign(min(beta, round(log_region(x, alpha, beta, gamma))), x))


def naive_bucket(pi, pj, method, n_prefix_bucket):
    """Bucket of the pair (i, j) from their (row, col) positions (None = a prefix token)."""
    if pi is None or pj is None:
        return n_prefix_bucket
    dr, dc = pi[0] - pj[0], pi[1] - pj[1]
    if method == 'product':
        return (g_ref(dr) + 3) * 7 + g_ref(dc) + 3
    if method == 'cross':
        return g_ref(dr) + 3, g_ref(dc) + 3
    if method == 'euclidean':
        return g_ref(round(math.sqrt(dr * dr + dc * dc)))
    return g_ref(dr * dr + dc * dc)  # quant


def token_positions(h, w, n_prefix):
    """Per token: None for prefix tokens, else (row, col)."""
    return [None] * n_prefix + [divmod(t, w) for t in range(h * w)]


# --- the piecewise function and the bucket tables ---------------------------------------------------------------
def test_piecewise_identity_up_to_alpha():
    assert [g(x) for x in (0, 0.4, 0.6, 1, 1.4, 1.6, 1.9)] == [0, 0, 1, 1, 1, 2, 2]


def test_piecewise_log_region_by_hand():
    # 1.9 + ln(x / 1.9) / ln(8) * 1.9
    assert log_region(3.0) == pytest.approx(2.3174, abs=1e-4) and g(3.0) == 2
    assert log_region(3.6) == pytest.approx(2.4839, abs=1e-4) and g(3.6) == 2  # just below .5 ...
    assert log_region(3.7) == pytest.approx(2.5090, abs=1e-4) and g(3.7) == 3  # ... and just above
    assert log_region(4.0) == pytest.approx(2.5802, abs=1e-4) and g(4.0) == 3
    # ratio 3 (alpha 3, beta 6, gamma 24): 3 + ln(10 / 3) / ln(8) * 3 = 4.737 -> 5, below the cap 6
    assert piecewise_index(torch.tensor([10.0]), 3.0, 6.0, 24.0).item() == 5


def test_piecewise_saturates_at_int_beta_and_is_odd():
    assert g(100) == 3 and g(1e6) == 3  # round() gives 6 and 28: capped at beta 3.8, i.e. 3
    x = torch.tensor([0.0, 0.6, 1.0, 2.0, 3.0, 3.7, 4.0, 7.0, 50.0])
    pos, neg = piecewise_index(x, ALPHA, BETA, GAMMA), piecewise_index(-x, ALPHA, BETA, GAMMA)
    assert pos.dtype == torch.long and torch.equal(neg, -pos)
    assert pos.tolist() == [0, 1, 1, 2, 2, 3, 3, 3, 3]
    assert [g_ref(v) for v in x.tolist()] == pos.tolist()


@pytest.mark.parametrize(
    ('method', 'expected'),
    # b = 3: product (2b+1)^2 = 49; cross 2b+1 = 7 per table; euclidean / quant b+1 = 4 (distances >= 0)
    [('product', 49), ('cross', 7), ('euclidean', 4), ('quant', 4)],
)
def test_bucket_counts_on_a_14x14_grid(method, expected):
    assert num_buckets(method, RATIO) == expected
    ids = bucket_ids(14, 14, method, RATIO, num_prefix=1)
    for table in ids if method == 'cross' else (ids,):
        assert table.shape == (197, 197) and table.dtype == torch.long
        assert sorted(table.unique().tolist()) == list(range(expected + 1))  # + the prefix bucket, the last
        assert (table[0] == expected).all() and (table[:, 0] == expected).all()
        assert (table[1:, 1:] < expected).all()


def test_bucket_ids_match_the_naive_definition():
    toks = token_positions(3, 4, 1)
    for method in ('product', 'cross', 'euclidean', 'quant'):
        ids = bucket_ids(3, 4, method, RATIO, num_prefix=1)
        nb = num_buckets(method, RATIO)
        ref = [[naive_bucket(pi, pj, method, nb) for pj in toks] for pi in toks]
        if method == 'cross':
            pick = lambda v, a: v if isinstance(v, int) else v[a]  # noqa: E731
            assert ids[0].tolist() == [[pick(v, 0) for v in row] for row in ref]
            assert ids[1].tolist() == [[pick(v, 1) for v in row] for row in ref]
        else:
            assert ids.tolist() == ref, method


# --- the terms against double loops -------------------------------------------------------------------------------
def setup_tiny(on, shared_heads=True, method='product', mode='contextual'):
    """An iRPE (dim 32, 4 heads, d 8) with random tables, random q, k, v on a 3x4 grid with 1 prefix token."""
    enc = vispe.build_encoding(
        {'type': 'irpe', 'on': on, 'shared_heads': shared_heads, 'method': method, 'mode': mode},
        dim=32,
        num_heads=4,
    )
    for table in enc.tables.values():
        torch.nn.init.normal_(table)
    q, k, v = torch.randn(3, 2, 4, 13, 8).unbind(0)
    return enc, q, k, v, grid_positions(3, 4, num_prefix=1)


def table_row(enc, name, h, bucket):
    table = enc.tables[name]
    return table[bucket] if enc.shared_heads else table[h, bucket]


@pytest.mark.parametrize('shared_heads', [True, False])
def test_contextual_k_matches_double_loop(shared_heads):
    enc, q, k, _, pos = setup_tiny('k', shared_heads)
    toks, scale = token_positions(3, 4, 1), 8**-0.5
    ref = torch.zeros(2, 4, 13, 13)
    for b in range(2):
        for h in range(4):
            for i in range(13):
                for j in range(13):
                    r = table_row(enc, 'k', h, naive_bucket(toks[i], toks[j], 'product', 49))
                    ref[b, h, i, j] = scale * q[b, h, i] @ r
    torch.testing.assert_close(enc.logit_bias(q, k, pos), ref)


def test_contextual_q_matches_double_loop():
    enc, q, k, _, pos = setup_tiny('q')
    toks, scale = token_positions(3, 4, 1), 8**-0.5
    ref = torch.zeros(2, 4, 13, 13)
    for i in range(13):
        for j in range(13):
            r = enc.tables['q'][naive_bucket(toks[j], toks[i], 'product', 49)]  # bucket(j, i)
            ref[:, :, i, j] = scale * k[:, :, j] @ r
    torch.testing.assert_close(enc.logit_bias(q, k, pos), ref)


def test_value_term_matches_double_loop():
    enc, q, k, v, pos = setup_tiny('v')
    attn = torch.randn(2, 4, 13, 13).softmax(-1)
    toks = token_positions(3, 4, 1)
    ref = torch.zeros(2, 4, 13, 8)
    for i in range(13):
        for j in range(13):
            ref[:, :, i] += attn[:, :, i, j, None] * enc.tables['v'][naive_bucket(toks[i], toks[j], 'product', 49)]
    torch.testing.assert_close(enc.value_term(v, pos, attn), ref)


@pytest.mark.parametrize('method', ['product', 'cross', 'euclidean', 'quant'])
def test_bias_mode_matches_double_loop(method):
    enc, q, k, _, pos = setup_tiny('k', shared_heads=False, method=method, mode='bias')
    toks, nb = token_positions(3, 4, 1), num_buckets(method, RATIO)
    ref = torch.zeros(1, 4, 13, 13)
    for i in range(13):
        for j in range(13):
            bucket = naive_bucket(toks[i], toks[j], method, nb)
            if method == 'cross':
                rows, cols = (bucket, bucket) if isinstance(bucket, int) else bucket
                ref[0, :, i, j] = enc.tables['k_rows'][:, rows] + enc.tables['k_cols'][:, cols]
            else:
                ref[0, :, i, j] = enc.tables['k'][:, bucket]
    torch.testing.assert_close(enc.logit_bias(q, k, pos), ref)


def test_bias_depends_only_on_the_offset():
    enc, *_ = setup_tiny('k', mode='bias')
    pos = grid_positions(6, 6)
    bias = enc.logit_bias(torch.randn(1, 4, 36, 8), torch.randn(1, 4, 36, 8), pos)[0, 0]
    t = lambda r, c: 6 * r + c  # noqa: E731
    same_offset = [((0, 0), (1, 1)), ((2, 3), (3, 4)), ((4, 4), (5, 5))]  # offset (-1, -1)
    vals = [bias[t(*a), t(*b)] for a, b in same_offset]
    assert all(v == vals[0] for v in vals)
    far = [((0, 0), (0, 5)), ((5, 1), (5, 5)), ((3, 0), (3, 4))]  # (0, -5) and (0, -4) share the saturated bucket
    assert len({bias[t(*a), t(*b)].item() for a, b in far}) == 1
    assert bias[t(0, 0), t(0, 1)] != bias[t(0, 0), t(1, 0)]  # (0, -1) vs (-1, 0): different buckets
    assert bias[t(0, 0), t(1, 1)] != bias[t(1, 1), t(0, 0)]  # (-1, -1) vs (1, 1): direction matters


def test_contextual_k_is_translation_invariant_for_equal_queries():
    enc, *_ = setup_tiny('k')
    q = torch.randn(1, 4, 1, 8).expand(1, 4, 36, 8)  # every query the same: only the offset is left
    bias = enc.logit_bias(q, q, grid_positions(6, 6))
    torch.testing.assert_close(bias[..., 0, 7], bias[..., 14, 21])  # (0,0)-(1,1) and (2,2)-(3,3)
    assert (bias[..., 0, 7] - bias[..., 0, 1]).abs().max() > 1e-3


def test_per_sample_positions_match_one_at_a_time():
    enc, q, k, _, pos = setup_tiny('qk')
    coords = torch.stack([pos.coords, pos.coords * 2])  # (2, 12, 2): a second, stretched layout
    batched = enc.logit_bias(q, k, Positions(coords, grid=(3, 4), num_prefix=1))
    for b in range(2):
        one = enc.logit_bias(q[b : b + 1], k[b : b + 1], Positions(coords[b], grid=(3, 4), num_prefix=1))
        torch.testing.assert_close(batched[b : b + 1], one)
    assert not torch.allclose(batched[0], batched[1])


# --- shapes, hooks, arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize('shared_heads', [True, False])
def test_bias_mode_shapes(shared_heads):
    enc, q, k, _, pos = setup_tiny('k', shared_heads, mode='bias')
    heads = 1 if shared_heads else 4
    assert enc.tables['k'].shape == ((50,) if shared_heads else (4, 50))
    assert enc.logit_bias(q, k, pos).shape == (1, heads, 13, 13)
    ctx = vispe.build_encoding({'type': 'irpe', 'shared_heads': shared_heads}, dim=32, num_heads=4)
    assert ctx.tables['k'].shape == ((50, 8) if shared_heads else (4, 50, 8))


def test_hooks_follow_on():
    k_only = vispe.build_encoding('irpe', dim=32, num_heads=4)
    assert type(k_only) is IRPE and not k_only.needs_attn_weights  # K-only keeps fused SDPA
    assert 'value_term' not in k_only.active_hooks() and list(k_only.state_dict()) == ['tables.k']
    qkv = vispe.build_encoding({'type': 'irpe', 'on': 'vkq'}, dim=32, num_heads=4)
    assert qkv.on == 'qkv' and qkv.needs_attn_weights and {'logit_bias', 'value_term'} == qkv.active_hooks()
    v_only = vispe.build_encoding({'type': 'irpe', 'on': 'v'}, dim=32, num_heads=4)
    assert v_only.active_hooks() == {'value_term'}
    clone = copy.deepcopy(qkv)
    assert type(clone) is type(qkv) and clone.needs_attn_weights


@pytest.mark.parametrize(
    ('kwargs', 'message'),
    [
        ({'method': 'manhattan'}, r"choose one of \['product', 'cross', 'euclidean', 'quant'\]"),
        ({'mode': 'ctx'}, r"choose one of \['contextual', 'bias'\]"),
        ({'on': ''}, "'q', 'k', 'v'"),
        ({'on': 'kx'}, "'q', 'k', 'v'"),
        ({'on': None}, "'q', 'k', 'v'"),
        ({'mode': 'bias', 'on': 'qk'}, "on='k' only"),
        ({'mode': 'bias', 'on': 'v'}, "on='k' only"),
        ({'ratio': 0}, 'ratio must be a number >= 0.5'),
        ({'ratio': -1.9}, 'ratio must be a number >= 0.5'),
    ],
)
def test_invalid_arguments_name_the_choices(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IRPE(32, 4, **kwargs)


def test_bf16_autocast_gives_a_finite_bias():
    enc, q, k, _, pos = setup_tiny('qk')
    with torch.autocast('cpu', dtype=torch.bfloat16):
        bias = enc.logit_bias(q.bfloat16(), k.bfloat16(), pos)
    assert torch.isfinite(bias.float()).all()
    torch.testing.assert_close(bias.float(), enc.logit_bias(q, k, pos), atol=0.1, rtol=0.05)


def test_bucket_tables_are_cached_not_stored():
    enc, q, k, _, pos = setup_tiny('k')
    first = enc.buckets(pos, 13)[0]
    assert enc.buckets(grid_positions(3, 4, num_prefix=1), 13)[0] is first
    assert list(enc.state_dict()) == ['tables.k']
    with pytest.raises(ValueError, match='1 prefix'):
        enc.logit_bias(q[..., 1:, :], k[..., 1:, :], pos)


# --- in a model -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('spec', ['irpe', {'type': 'irpe', 'on': 'qkv'}])
def test_model_forward_backward_reaches_the_tables(spec):
    model = vispe.create_model(
        'vit_tiny_patch16_224',
        encoding=[spec, 'ape_learned'],
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        num_classes=5,
    )
    tables = {n: p for n, p in model.named_parameters() if '.pe.irpe.tables.' in n}
    assert len(tables) == 2 * len(model.blocks[0].attn.pe['irpe'].on)
    for size in ((32, 32), (48, 64)):
        model.zero_grad()
        out = model(torch.randn(2, 3, *size))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.square().sum().backward()
        for name, p in tables.items():  # zero-initialised, yet the gradient is not zero
            assert p.grad is not None and p.grad.abs().sum() > 0, name
