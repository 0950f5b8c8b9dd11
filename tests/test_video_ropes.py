"""The video rotary encodings (mrope, videorope, vrope): timm's RotaryEmbeddingMRope on video, the worked examples of
the spec (derived from the authors' code), the relative property, time spacing, the strategies, the checks."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from timm.layers.pos_embed_sincos import RotaryEmbeddingMRope, _rope_layout, apply_rot_embed, apply_rot_embed_cat

import vispe
from vispe.encodings.rotary_scaling import yarn_factors
from vispe.layout import make_layout
from vispe.positions import Positions, video_positions

VIDEO = ['mrope', 'videorope', 'vrope']


def build(name, head_dim=16, heads=2, **options):
    """``name`` with its options (``strategy`` among them) for a head dim of ``head_dim``."""
    return vispe.build_encoding({'type': name, **options}, dim=head_dim * heads, num_heads=heads)


def to_vispe(d):
    """vispe's channel c holds the rotate-half reference's channel index[c]: pair j of the reference is channels
    (j, j + d/2), vispe's (2j, 2j + 1), so q and k permuted by it give the same q . k (dinov3's docstring)."""
    index = torch.empty(d, dtype=torch.long)
    index[0::2], index[1::2] = torch.arange(d // 2), torch.arange(d // 2) + d // 2
    return index


def half_reference(x, angles):
    """The references' rotate-half rotation of (..., N, d) x by (N, d/2) angles (timm's apply_rot_embed)."""
    return apply_rot_embed(x, _rope_layout(angles.sin(), True), _rope_layout(angles.cos(), True), half=True)


def inv_freq(d, theta=10000.0):
    return 1.0 / theta ** (torch.arange(0, d, 2).float() / d)


def positions_of(enc, pos):
    return enc.channel_positions(pos.coords, pos.grid)


# --- 1. parity with timm ------------------------------------------------------------------------------------------
@pytest.mark.parametrize('head_dim,section', [(16, (8, 12, 12)), (64, (8, 12, 12)), (32, (4, 6, 4))])
def test_mrope_equals_timm_on_video(head_dim, section):
    """The spec's recipe on timm's module (its axis and frequencies, t the tubelet index), rotate-half: vispe on
    permuted channels gives timm's result permuted; the t = 0 frame is timm's own image path."""
    T, H, W = 3, 4, 5
    m = RotaryEmbeddingMRope(head_dim, mrope_section=section).eval()
    tt, hh, ww = torch.meshgrid(torch.arange(T), torch.arange(H), torch.arange(W), indexing='ij')
    pos3 = torch.stack([tt, hh, ww], -1).reshape(-1, 3).float()
    ang = pos3.index_select(-1, m.axis) * m.inv_freq
    emb = torch.cat([_rope_layout(ang.sin(), True), _rope_layout(ang.cos(), True)], -1)
    torch.testing.assert_close(emb[: H * W], m.get_embed([H, W]))  # the recipe is timm's at t = 0

    enc = build('mrope', head_dim, mrope_section=section)
    assert torch.equal(enc.axis, m.axis) and torch.equal(enc.inv_freq, m.inv_freq)
    q, k = torch.randn(2, 2, 1 + T * H * W, head_dim), torch.randn(2, 2, 1 + T * H * W, head_dim)
    perm = to_vispe(head_dim)
    qv, kv = enc.rotate(q[..., perm], k[..., perm], video_positions(T, H, W, num_prefix=1))
    torch.testing.assert_close(qv[:, :, 1:], apply_rot_embed_cat(q[:, :, 1:], emb, half=True)[..., perm])
    torch.testing.assert_close(kv[:, :, 1:], apply_rot_embed_cat(k[:, :, 1:], emb, half=True)[..., perm])
    frame0 = apply_rot_embed_cat(q[:, :, 1 : 1 + H * W], m.get_embed([H, W]), half=True)
    torch.testing.assert_close(qv[:, :, 1 : 1 + H * W], frame0[..., perm])
    assert torch.equal(qv[:, :, 0], q[:, :, 0, perm])


# --- 2. the spec's worked examples and formulas ---------------------------------------------------------------------
#: d = 16, T = H = W = 2, tokens row-major over (t, h, w): p_0 .. p_7 as written in the spec
SPEC_MROPE = [
    [0, 0, 0, 0, 0, 0, 0, 0],  # (0, 0, 0)
    [0, 0, 1, 0, 0, 1, 0, 0],  # (0, 0, 1)
    [0, 1, 0, 0, 1, 0, 0, 1],  # (0, 1, 0)
    [0, 1, 1, 0, 1, 1, 0, 1],  # (0, 1, 1)
    [1, 0, 0, 1, 0, 0, 1, 0],  # (1, 0, 0)
    [1, 0, 1, 1, 0, 1, 1, 0],  # (1, 0, 1)
    [1, 1, 0, 1, 1, 0, 1, 1],  # (1, 1, 0)
    [1, 1, 1, 1, 1, 1, 1, 1],  # (1, 1, 1)
]
SPEC_VIDEOROPE = [
    [0, 0, 0, 0, 0, 0, 0, 0],  # (0, 0, 0)
    [0, 1, 0, 1, 0, 1, 0, 0],  # (0, 0, 1)
    [1, 0, 1, 0, 1, 0, 0, 0],  # (0, 1, 0)
    [1, 1, 1, 1, 1, 1, 0, 0],  # (0, 1, 1)
    [2, 2, 2, 2, 2, 2, 2, 2],  # (1, 0, 0)
    [2, 3, 2, 3, 2, 3, 2, 2],  # (1, 0, 1)
    [3, 2, 3, 2, 3, 2, 2, 2],  # (1, 1, 0)
    [3, 3, 3, 3, 3, 3, 2, 2],  # (1, 1, 1)
]
SPEC_VROPE = [
    [0, 1, 1, 2, 0, 1, 1, 2],  # (0, 0, 0)
    [1, 0, 2, 1, 1, 0, 2, 1],  # (0, 0, 1)
    [1, 2, 0, 1, 1, 2, 0, 1],  # (0, 1, 0)
    [2, 1, 1, 0, 2, 1, 1, 0],  # (0, 1, 1)
    [3, 4, 4, 5, 3, 4, 4, 5],  # (1, 0, 0)
    [4, 3, 5, 4, 4, 3, 5, 4],  # (1, 0, 1)
    [4, 5, 3, 4, 4, 5, 3, 4],  # (1, 1, 0)
    [5, 4, 4, 3, 5, 4, 4, 3],  # (1, 1, 1)
]


@pytest.mark.parametrize('name,table', [('mrope', SPEC_MROPE), ('videorope', SPEC_VIDEOROPE), ('vrope', SPEC_VROPE)])
def test_the_spec_worked_examples(name, table):
    enc = build(name)  # d = 16, defaults (videorope: delta 2, 2 time pairs)
    pos = video_positions(2, 2, 2)
    assert torch.equal(positions_of(enc, pos), torch.tensor(table, dtype=torch.float32))
    torch.testing.assert_close(enc.angles(pos.coords, pos.grid), torch.tensor(table).float() * inv_freq(16))


def test_videorope_spec_angles_and_centring():
    enc = build('videorope')
    pos = video_positions(2, 2, 2)
    expected = [3, 0.632456, 0.3, 0.0632456, 0.03, 0.00632456, 0.002, 0.000632456]  # token (1, 1, 0)
    torch.testing.assert_close(enc.angles(pos.coords, pos.grid)[6], torch.tensor(expected), rtol=1e-5, atol=1e-8)
    centred = positions_of(enc, video_positions(2, 3, 3)).reshape(2, 3, 3, 8)[:, 1, 1]  # (t, 1, 1): (2t, 2t, 2t)
    assert torch.equal(centred, torch.tensor([[0.0] * 8, [2.0] * 8]))


def test_vrope_spec_extra_check():
    p = positions_of(build('vrope'), video_positions(1, 2, 3))  # T = 1, H = 2, W = 3
    assert torch.equal(p[0], torch.tensor([0.0, 2, 1, 3, 0, 2, 1, 3]))  # token (0, 0): combos (0, 2, 1, 3)
    assert torch.equal(p[5], torch.tensor([3.0, 1, 2, 0, 3, 1, 2, 0]))  # token (1, 2): combos (3, 1, 2, 0)


def videorope_reference(T, H, W, d, delta):
    """The spec's formulas: LTA axes (h, w alternating, the lowest d/8 pairs time), DL ids with ATS delta."""
    pairs, n_t = d // 2, d // 8
    axes = ['hw'[i % 2] for i in range(pairs - n_t)] + ['t'] * n_t
    rows = []
    for t in range(T):
        for h in range(H):
            for w in range(W):
                ids = {'t': delta * t, 'h': delta * t + h - (H - 1) // 2, 'w': delta * t + w - (W - 1) // 2}
                rows.append([ids[a] for a in axes])
    return torch.tensor(rows, dtype=torch.float32)


def vrope_reference(T, H, W, d):
    """The spec's formulas: channel i reads c_{i mod 4} + t (H + W - 1)."""
    rows = []
    for t in range(T):
        for h in range(H):
            for w in range(W):
                c = [h + w, h + (W - 1 - w), (H - 1 - h) + w, (H - 1 - h) + (W - 1 - w)]
                rows.append([t * (H + W - 1) + c[i % 4] for i in range(d // 2)])
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize(
    'name,kwargs,reference',
    [
        ('videorope', {'delta': 2.0}, lambda d: videorope_reference(3, 4, 5, d, 2.0)),
        ('videorope', {'delta': 0.5}, lambda d: videorope_reference(3, 4, 5, d, 0.5)),
        ('vrope', {}, lambda d: vrope_reference(3, 4, 5, d)),
    ],
)
@pytest.mark.parametrize('head_dim', [16, 32])
def test_formulas_on_a_3x4x5_clip(name, kwargs, reference, head_dim):
    """Positions, angles and the rotation against an independent rotate-half reference of the spec's formulas."""
    enc = build(name, head_dim, **kwargs)
    pos = video_positions(3, 4, 5, num_prefix=1)
    ref = reference(head_dim)
    torch.testing.assert_close(positions_of(enc, pos), ref)
    angles = ref * inv_freq(head_dim)
    q, k = torch.randn(2, 2, 61, head_dim), torch.randn(2, 2, 61, head_dim)
    perm = to_vispe(head_dim)
    qv, kv = enc.rotate(q[..., perm], k[..., perm], pos)
    torch.testing.assert_close(qv[:, :, 1:], half_reference(q[:, :, 1:], angles)[..., perm])
    torch.testing.assert_close(kv[:, :, 1:], half_reference(k[:, :, 1:], angles)[..., perm])


# --- 3. properties --------------------------------------------------------------------------------------------------
def logits(enc, q, k, pos):
    qr, kr = enc.rotate(q, k, pos)
    return qr @ kr.transpose(-1, -2)


@pytest.mark.parametrize('name', VIDEO)
def test_patch_logits_depend_only_on_the_offset(name):
    """The clip shifted by integers in time and space: patch-patch logits unchanged, those against the unrotated
    prefix token changed; with one q and one k vector for every token, equal offsets give equal logits."""
    enc = build(name, 32)
    pos = video_positions(3, 4, 5, num_prefix=1)
    moved = Positions(pos.coords + torch.tensor([2.0, -3.0, 5.0]), grid=pos.grid, num_prefix=1)
    q, k = torch.randn(1, 2, 61, 32), torch.randn(1, 2, 61, 32)
    a, b = logits(enc, q, k, pos), logits(enc, q, k, moved)
    torch.testing.assert_close(a[..., 1:, 1:], b[..., 1:, 1:], atol=2e-4, rtol=1e-4)
    assert (a[..., 0, 1:] - b[..., 0, 1:]).abs().max() > 0.1

    same = logits(enc, q[:, :, :1].expand_as(q), k[:, :, :1].expand_as(k), pos)[0, :, 1:, 1:]
    same = same.reshape(2, 3, 4, 5, 3, 4, 5)  # [head, query t, h, w, key t, h, w]
    torch.testing.assert_close(same[:, 0, 0, 0, 1, 1, 1], same[:, 1, 2, 3, 2, 3, 4], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(same[:, 2, 3, 1, 0, 1, 4], same[:, 2, 2, 0, 0, 0, 3], atol=2e-4, rtol=1e-4)
    assert (same[:, 0, 0, 0, 1, 1, 1] - same[:, 0, 0, 0, 1, 1, 2]).abs().max() > 1e-3  # it does depend on it


@pytest.mark.parametrize('name', VIDEO)
def test_prefix_tokens_are_not_rotated(name):
    enc = build(name)
    q, k = torch.randn(2, 2, 2 + 12, 16), torch.randn(2, 2, 2 + 12, 16)
    qr, kr = enc.rotate(q, k, video_positions(2, 2, 3, num_prefix=2))
    assert torch.equal(qr[:, :, :2], q[:, :, :2]) and torch.equal(kr[:, :, :2], k[:, :, :2])
    assert not torch.allclose(qr[:, :, 3:], q[:, :, 3:])


@pytest.mark.parametrize('strategy', ['none', 'interpolate'])
@pytest.mark.parametrize('name', VIDEO)
def test_time_spacing_is_every_second_tubelet_of_a_longer_clip(name, strategy):
    enc = build(name, 32, grid_size=(3, 4, 5), strategy=strategy)
    spaced = enc.build_table(video_positions(3, 4, 5, num_prefix=1, time_spacing=2.0))
    longer = enc.build_table(video_positions(6, 4, 5, num_prefix=1))
    assert torch.equal(spaced[0], longer[0])  # the prefix row
    torch.testing.assert_close(spaced[1:].reshape(3, 20, 16, 2), longer[1:].reshape(6, 20, 16, 2)[::2])


@pytest.mark.parametrize('name', VIDEO)
def test_interpolate_maps_twice_the_frames_onto_the_training_clip(name):
    """PI at 2x frames: frame 2j sits where the training clip's frame j does, frame 2j + 1 half-way to j + 1."""
    enc = build(name, 32, grid_size=(3, 4, 5), strategy='interpolate')
    plain = build(name, 32, grid_size=(3, 4, 5))
    train = video_positions(3, 4, 5)
    got = enc.build_table(video_positions(6, 4, 5)).reshape(3, 2, 20, 16, 2)
    torch.testing.assert_close(got[:, 0], plain.build_table(train).reshape(3, 20, 16, 2))
    half_way = plain.angles(train.coords + torch.tensor([0.5, 0.0, 0.0]), train.grid)
    torch.testing.assert_close(got[:, 1], torch.stack([half_way.cos(), half_way.sin()], -1).reshape(3, 20, 16, 2))
    untouched = plain.build_table(video_positions(6, 4, 5)).reshape(3, 2, 20, 16, 2)
    assert not torch.allclose(untouched[1:, 0], got[1:, 0])  # 'none' extends instead


def test_vrope_time_stride_options():
    """'grid': H + W - 1 of the clip; 'train': of the training grid; under interpolate the mapped grid's, the
    training grid's."""
    pos = video_positions(2, 8, 10)

    def stride(enc):
        p = enc.channel_positions(pos.coords, pos.grid, enc.axis_scales(pos.coords, pos.grid_span))
        return (p[80] - p[0]).unique().tolist()  # token (1, 0, 0) minus (0, 0, 0), on every channel

    assert stride(build('vrope')) == [17.0]
    assert stride(build('vrope', grid_size=(2, 4, 5), time_stride='train')) == [8.0]
    assert stride(build('vrope', grid_size=(2, 4, 5), strategy='interpolate')) == [8.0]


@pytest.mark.parametrize('name', ['mrope', 'videorope'])
def test_ntk_keeps_each_axis_fastest_frequency_and_divides_its_slowest(name):
    enc = build(name, 64, grid_size=(4, 4, 4), strategy='ntk')
    pos = video_positions(8, 12, 4)
    scales = enc.axis_scales(pos.coords, pos.grid_span)
    assert scales == (2.0, 3.0, 1.0)
    freqs, base = enc.frequencies(scales), enc.inv_freq
    for axis, s in enumerate(scales):
        own = (enc.axis == axis).nonzero().flatten()
        n = len(own)
        assert freqs[own[0]] == base[own[0]]
        torch.testing.assert_close(freqs[own[-1]], base[own[-1]] / s)
        torch.testing.assert_close(freqs[own], base[own] * s ** (-torch.arange(n) / (n - 1)))
    angles = enc.angles(pos.coords, pos.grid, scales)
    torch.testing.assert_close(angles, positions_of(enc, pos) * freqs)


@pytest.mark.parametrize('name', ['mrope', 'videorope'])
def test_yarn_frequencies_and_logit_scale(name):
    enc = build(name, 32, grid_size=(2, 4, 4), strategy='yarn')
    pos = video_positions(4, 8, 4, num_prefix=1)  # scales (2, 2, 1): geometric mean 2^(2/3)
    freqs, base = enc.frequencies((2.0, 2.0, 1.0)), enc.inv_freq
    for axis, (s, length) in enumerate(zip((2.0, 2.0, 1.0), (2, 4, 4))):
        own = enc.axis == axis
        torch.testing.assert_close(freqs[own], base[own] * yarn_factors(base[own], s, length))
    # 2 frames: every time pair turns < 1 time; all interpolated but the fastest, which the references' ramp keeps
    assert (freqs[enc.axis == 0][1:] < base[enc.axis == 0][1:]).all()
    scale = 0.1 * math.log(2 ** (2 / 3)) + 1  # YaRN's sqrt(1/t) on q and k each
    q, k = torch.randn(1, 2, 1 + 128, 32), torch.randn(1, 2, 1 + 128, 32)
    qr, kr = enc.rotate(q, k, pos)
    torch.testing.assert_close(qr.norm(dim=-1), scale * q.norm(dim=-1))  # logits by (0.1 ln s + 1)^2
    torch.testing.assert_close(kr.norm(dim=-1), scale * k.norm(dim=-1))


@pytest.mark.parametrize('name', VIDEO)
def test_strategies_need_the_training_grid_and_dype_is_not_offered(name):
    cls = vispe.encodings.encoding_class(name)
    assert cls.strategies == (('none', 'interpolate') if name == 'vrope' else ('none', 'interpolate', 'ntk', 'yarn'))
    assert cls.opt_in_strategies == ()
    for strategy in cls.strategies[1:]:
        with pytest.raises(ValueError, match='training grid'):
            build(name, strategy=strategy)


@pytest.mark.parametrize('name', VIDEO)
def test_refusals_are_one_line(name):
    errors = []
    for kwargs, match in [
        ({'ndim': 2}, 'needs ndim=3, got ndim=2'),
        ({'dim': 30, 'num_heads': 2}, 'even head dim .* got 15; change embed_dim or num_heads'),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            vispe.build_encoding(name, **{'dim': 32, 'num_heads': 2, **kwargs})
        errors.append(err)
    pos = video_positions(1, 2, 2)
    mixed = dataclasses.replace(pos, grid=None, key=None, layout=make_layout([(2, 2), (1, 2)], prefix_per_image=0))
    with pytest.raises(ValueError, match='one clip size per batch') as err:
        build(name).rotate(torch.randn(1, 1, 4, 16), torch.randn(1, 1, 4, 16), mixed)
    errors.append(err)
    assert all('\n' not in str(e.value) for e in errors)


def test_options_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match='mrope gives no channel pair to h or w'):
        build('mrope', mrope_section=(8, 0, 12))
    with pytest.raises(ValueError, match='videorope needs time_pairs between 1 and 6'):
        build('videorope', time_pairs=7)
    with pytest.raises(ValueError, match="time_stride='train' takes the training grid"):
        build('vrope', time_stride='train')


# --- 4. gradients and autocast --------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', VIDEO)
def test_gradients_and_bf16_autocast(name):
    pos = video_positions(2, 3, 4, num_prefix=1)
    q, k, v = (torch.randn(2, 2, 25, 32, requires_grad=True) for _ in range(3))
    enc = build(name, 32)
    out = F.scaled_dot_product_attention(*enc.rotate(q, k, pos), v)
    out.square().sum().backward()
    for x in (q, k):
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    fresh = build(name, 32)  # its table built under autocast
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        assert fresh.build_table(pos).dtype == torch.float32
        q16, k16 = fresh.rotate(q.bfloat16(), k.bfloat16(), pos)
        out16 = F.scaled_dot_product_attention(q16, k16, v.bfloat16())
    assert q16.dtype == torch.bfloat16
    assert (out16.float() - out).abs().max() <= 0.05 + 0.05 * out.abs().max()


@pytest.mark.parametrize('name', VIDEO)
def test_compiles_as_one_graph_without_complex_values(name):
    """Under torch.compile the table is built in the graph (no cache lookup) and the rotation takes the real path:
    one graph, no complex value, the eager result."""
    enc = build(name, 32, grid_size=(2, 2, 3), strategy='interpolate')
    pos = video_positions(2, 4, 3, num_prefix=1)
    graphs, complex_nodes = [], []

    def backend(gm, example_inputs):
        graphs.append(gm)
        for node in gm.graph.nodes:
            value = node.meta.get('example_value')
            if isinstance(value, torch.Tensor) and value.is_complex():
                complex_nodes.append(node.name)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k: enc.rotate(q, k, pos), backend=backend, fullgraph=True)
    q, k = torch.randn(2, 2, 25, 32), torch.randn(2, 2, 25, 32)
    for got, want in zip(compiled(q, k), enc.rotate(q, k, pos)):
        torch.testing.assert_close(got, want)
    assert len(graphs) == 1 and not complex_nodes


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed', *VIDEO])
def test_the_space_time_vit_rotates_through_the_fused_kernel(name, monkeypatch):
    """On a GPU every video rotary encoding takes the Triton kernel (``rotary_backend``: 'triton' for CUDA tensors):
    forced here through Triton's interpreter, the whole space-time ViT's logits and gradients (the learned
    frequencies' too) equal the plain PyTorch reference's, and the kernel is what ran."""
    pytest.importorskip('triton')
    from vispe.backbones.video import VideoTransformer
    from vispe.kernels import rotary
    from vispe.kernels.rotary import use_rotary_backend

    launches = []
    module = rotary._triton_launch()

    class Counting:
        KERNEL_DTYPES = module.KERNEL_DTYPES

        @staticmethod
        def launch(*args, **kwargs):
            launches.append(1)
            return module.launch(*args, **kwargs)

    monkeypatch.setattr(rotary, '_triton_launch', lambda: Counting)
    torch.manual_seed(0)
    model = VideoTransformer(encoding=name, img_size=8, num_frames=4, embed_dim=32, depth=1, num_heads=2)
    clips = torch.randn(2, 3, 4, 8, 8)
    results = {}
    for backend in ('triton', 'torch'):
        model.zero_grad()
        with use_rotary_backend(backend):
            logits = model(clips)
            logits.square().sum().backward()
        results[backend] = (logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        if backend == 'triton':
            assert len(launches) == 2  # forward and backward, one pass each over q and k
    (got, got_grads), (ref, ref_grads) = results['triton'], results['torch']
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert got_grads.keys() == ref_grads.keys()
    for key in ref_grads:
        torch.testing.assert_close(got_grads[key], ref_grads[key], rtol=1e-4, atol=1e-5, msg=key)
