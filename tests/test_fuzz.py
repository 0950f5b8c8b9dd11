"""Fuzzed shapes (hypothesis) over every registered encoding.

Backbones: each encoding runs in the backbone that serves it (ViT for image encodings, PointTransformer for point
encodings, MultiViewTransformer for camera encodings) at random grids (1x1 to 40x40, non-square, any training
grid), batch sizes, prefix-token counts (cls on / off, 0-2 registers), encoding options and resolution strategies;
outputs and features have the right shapes and are finite in float32 and under bf16 autocast, gradients are finite,
a sample's output does not depend on the rest of its batch nor on what the model ran before (grid-table caches),
and models cast to bf16 / float64 weights run.

Hooks: rotary encodings stay relative in the form each one documents: rope_axial, rope_mixed, harope (patch-patch
logits, any strategy, grid or rpe2d-sampled positions), comrope (shifting coordinates on a fixed grid, whose extent
normalises them; any shift without a grid), rope3d (any translation of the points; every logit with the centroid
prefix), gta and prope (any change of world frame and patch shift); iRPE's buckets are relative too.

Examples are derandomized (the same every run) and each draws its own torch seed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import vispe
from vispe import geometry as G
from vispe.attention import Attention
from vispe.backbones import MultiViewTransformer, PointTransformer, VideoTransformer
from vispe.encodings.build import encoding_class
from vispe.encodings.irpe import METHODS
from vispe.encodings.rotary_scaling import DYPE_STRATEGIES
from vispe.positions import RPE2D, Cameras, Positions, grid_coords, grid_positions

IMAGE = vispe.list_encodings(ndim=2)
POINT = vispe.list_encodings(ndim=3, grid=False)
CAMERA = sorted(set(vispe.list_encodings(ndim=2, cameras=True)) - set(IMAGE))
#: video token grids (those with a 2D form are fuzzed on images above, and here on clips too)
VIDEO = sorted(set(vispe.list_encodings(ndim=3)) - set(POINT))
VIDEO_ROTARY = ['mrope', 'videorope', 'vrope']  # their relative property: tests/test_video_ropes.py
GRID_ROTARY = ['rope_axial', 'rope_mixed', 'harope', 'rope_dinov3']
COMROPE = ['comrope_ap', 'comrope_ld']
STRING = ['string_cayley', 'string_circulant']
#: camera encodings that transform q, k, v and the output by each view's 4 x 4 block (GTA's scheme)
CAMERA_ROTARY = ['gta', 'prope']
#: every encoding with a rotate hook, and the test below that checks its relative property
RELATIVE_TESTED = {*GRID_ROTARY, *COMROPE, *STRING, 'liere', 'rope3d', *CAMERA_ROTARY, *VIDEO_ROTARY}

MAX_GRID = 40  # grids from 1x1 to MAX_GRID x MAX_GRID tokens


def fuzz(max_examples: int, shrink: bool = True) -> settings:
    """Reproducible settings: the same examples every run, no example database, no deadline."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else []),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: token grids, the extreme corners drawn more often than uniform draws would
grids = st.one_of(
    st.sampled_from([(1, 1), (1, MAX_GRID), (MAX_GRID, 1), (MAX_GRID, MAX_GRID)]),
    st.tuples(st.integers(1, MAX_GRID), st.integers(1, MAX_GRID)),
)
seeds = st.integers(0, 2**31 - 1)


def encoding_options(name: str) -> st.SearchStrategy:
    """Constructor options worth varying, per encoding (the backbone context is added by the backbone)."""
    kernel = st.fixed_dictionaries({'kernel_size': st.sampled_from([1, 3, 5])})
    irpe_contextual = st.fixed_dictionaries(
        {
            'method': st.sampled_from(METHODS),
            'on': st.sampled_from(['k', 'q', 'v', 'qk', 'qkv']),
            'shared_heads': st.booleans(),
            'ratio': st.sampled_from([0.5, 1.9, 3.0]),
        }
    )
    irpe_bias = st.fixed_dictionaries(
        {'method': st.sampled_from(METHODS), 'mode': st.just('bias'), 'shared_heads': st.booleans()}
    )
    options = {
        'comrope_ap': st.fixed_dictionaries({'block_size': st.sampled_from([2, 4, 8]), 'jitter': st.booleans()}),
        'comrope_ld': st.fixed_dictionaries({'block_size': st.sampled_from([2, 4, 8]), 'jitter': st.booleans()}),
        'irpe': st.one_of(irpe_contextual, irpe_bias),
        'lepe': kernel,
        'peg': kernel,
        'lff': st.fixed_dictionaries({}, optional={'num_features': st.sampled_from([2, 8, 64])}),
        'loope': st.fixed_dictionaries({'order': st.sampled_from(['gilbert', 'raster']), 'context': st.booleans()}),
        'rope3d': st.fixed_dictionaries(
            {
                'mode': st.sampled_from(['axial', 'mixed']),
                'prefix': st.sampled_from(['centroid', 'none']),
                'freq_scale': st.sampled_from([0.5, 4.0, 8.0, 16.0]),
            }
        ),
        **dict.fromkeys(
            STRING,
            st.fixed_dictionaries(
                {'frequencies': st.sampled_from(['mixed', 'axial'])},
                optional={'prefix': st.sampled_from(['none', 'centroid'])},
            ),
        ),
        'plucker': st.fixed_dictionaries({'patchify': st.booleans(), 'relative': st.booleans()}),
        'petr': st.fixed_dictionaries(
            {'num_depths': st.sampled_from([1, 4, 16]), 'feature_guided': st.booleans(), 'relative': st.booleans()}
        ),
        'gta': st.fixed_dictionaries(
            {
                'se3_fraction': st.sampled_from([0.0, 0.25, 0.5, 1.0]),
                'transform_values': st.booleans(),
                'relative': st.booleans(),
            }
        ),
        'prope': st.fixed_dictionaries({'intrinsics': st.booleans()}),
        '3dppe': st.fixed_dictionaries({'relative': st.booleans(), 'detach_depth': st.booleans()}),
    }
    return options.get(name, st.just({}))


def set_strategy(model: torch.nn.Module, data) -> str | None:
    """Draw one of the encoding's resolution strategies and set it on every instance; None when it has none. DyPE's
    are left out: they follow a DiT sampler's diffusion time, which these backbones do not carry (test_dype.py)."""
    encodings = [m for m in model.modules() if isinstance(m, vispe.Encoding) and type(m).strategies]
    if not encodings:
        return None
    choices = [s for s in type(encodings[0]).strategies if s not in DYPE_STRATEGIES]
    strategy = data.draw(st.sampled_from(choices), label='strategy')
    for enc in encodings:
        enc.strategy = strategy
    return strategy


# --- backbones -----------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """A backbone serving one encoding, a batch for it and what its outputs must look like."""

    model: torch.nn.Module
    inputs: tuple
    out_shape: tuple
    feat_shape: tuple
    #: inputs -> other inputs the model must not tell apart (a relative or normalised encoding), or None
    invariance: Callable[[tuple], tuple] | None = None
    #: extra checks on the float32 model (another grid, intermediates); run between two forwards of ``inputs``
    extra: Callable[[], None] | None = None
    #: the (h, w) token grid of an image model
    grid: tuple | None = None


def vit_case(name: str, data) -> Case:
    h, w = data.draw(grids, label='grid')
    batch = data.draw(st.integers(1, 3), label='batch')
    patch = data.draw(st.sampled_from([1, 2, 4]), label='patch')
    train = data.draw(st.tuples(st.integers(1, 8), st.integers(1, 8)), label='training grid')
    class_token = data.draw(st.booleans(), label='class_token')
    reg_tokens = data.draw(st.integers(0, 2), label='reg_tokens')
    pools = ['token', 'avg', 'max', 'avgmax'] if class_token else ['avg', 'max', 'avgmax']
    pool = data.draw(st.sampled_from(pools), label='global_pool')
    pad = data.draw(st.booleans(), label='dynamic_img_pad')
    options = data.draw(encoding_options(name), label='options')
    torch.manual_seed(data.draw(seeds, label='seed'))
    model = vispe.create_model(
        'vit_tiny_patch16_224',
        encoding={'type': name, **options},
        img_size=(train[0] * patch, train[1] * patch),
        patch_size=patch,
        embed_dim=32,
        depth=1,
        num_heads=2,
        mlp_ratio=2.0,
        num_classes=3,
        class_token=class_token,
        reg_tokens=reg_tokens,
        no_embed_class=data.draw(st.booleans(), label='no_embed_class'),
        global_pool=pool,
        dynamic_img_pad=pad,
    ).eval()
    set_strategy(model, data)
    prefix = int(class_token) + reg_tokens
    assert model.num_prefix_tokens == prefix, name
    # with padding the image may fall short of the grid by up to patch - 1 pixels on each side
    crop = st.integers(0, patch - 1) if pad else st.just(0)
    size = (h * patch - data.draw(crop, label='crop rows'), w * patch - data.draw(crop, label='crop cols'))
    x = torch.randn(batch, 3, *size)

    h2, w2 = data.draw(grids, label='second grid')

    def intermediates_at_another_grid() -> None:
        """A second grid through forward_intermediates: NCHW maps on that grid, the prefix tokens apart."""
        y = torch.randn(1, 3, h2 * patch, w2 * patch)
        final, inter = model.forward_intermediates(y, indices=1, return_prefix_tokens=True)
        assert final.shape == (1, prefix + h2 * w2, 32), f'{name}: features {tuple(final.shape)}'
        if prefix:
            ((maps, prefix_tokens),) = inter
            assert prefix_tokens.shape == (1, prefix, 32), f'{name}: prefix {tuple(prefix_tokens.shape)}'
        else:
            (maps,) = inter
        assert maps.shape == (1, 32, h2, w2), f'{name}: intermediates {tuple(maps.shape)} on a {h2}x{w2} grid'
        assert torch.isfinite(final).all() and torch.isfinite(maps).all(), f'{name}: non-finite at {h2}x{w2}'

    feat_shape = (batch, prefix + h * w, 32)
    return Case(model, (x,), (batch, 3), feat_shape, extra=intermediates_at_another_grid, grid=(h, w))


def point_case(name: str, data) -> Case:
    batch = data.draw(st.integers(1, 3), label='batch')
    num_points = data.draw(st.integers(32, 200), label='points')
    num_groups = data.draw(st.integers(1, 40), label='groups')
    group_size = data.draw(st.sampled_from([1, 8, 32]), label='group_size')
    num_heads = data.draw(st.sampled_from([1, 2, 4]), label='heads')  # head dims 48, 24, 12
    depth = data.draw(st.integers(1, 2), label='depth')
    options = data.draw(encoding_options(name), label='options')
    scale = data.draw(st.sampled_from([0.1, 1.0, 10.0]), label='cloud scale')
    shift = data.draw(st.tuples(*[st.floats(-5, 5)] * 3), label='translation (cloud units)')
    torch.manual_seed(data.draw(seeds, label='seed'))
    model = PointTransformer(
        num_classes=5,
        encoding={'type': name, **options},
        num_groups=num_groups,
        group_size=group_size,
        embed_dim=48,
        depth=depth,
        num_heads=num_heads,
        drop_path_rate=0.0,
        group_hidden=16,
    ).eval()
    cloud = torch.randn(batch, num_points, 3) * scale
    invariance = None
    # rope3d is relative (the centroid prefix keeps the cls logits relative too); lff min-max normalises the cloud
    if name == 'lff' or (name == 'rope3d' and options['prefix'] == 'centroid'):
        t = torch.tensor(shift) * scale

        def invariance(inputs):
            return (inputs[0] + t,)

    return Case(model, (cloud,), (batch, 5), (batch, 1 + min(num_groups, num_points), 48), invariance)


def camera_case(name: str, data) -> Case:
    batch = data.draw(st.integers(1, 3), label='batch')
    views = data.draw(st.integers(1, 3), label='views')
    patch = data.draw(st.sampled_from([2, 4]), label='patch')
    h, w = data.draw(st.tuples(st.integers(1, 8), st.integers(1, 8)), label='grid per view')
    train = data.draw(st.tuples(st.integers(1, 8), st.integers(1, 8)), label='training grid')
    options = data.draw(encoding_options(name), label='options')
    # a per-view image encoding alongside (gta and prope already rotate by the patch position: no second rotary)
    companions = ['ape_learned', 'ape_sincos', 'lff'] + ([] if name in CAMERA_ROTARY else ['rope_mixed', 'rope_axial'])
    companion = data.draw(st.none() | st.sampled_from(companions), label='image encoding')
    seed = data.draw(seeds, label='seed')
    g = torch.Generator().manual_seed(seed)
    H, W = h * patch, w * patch
    eye = torch.nn.functional.normalize(torch.randn(batch, views, 3, generator=g), dim=-1) * 3.5
    poses = G.look_at(eye, 0.2 * torch.randn(batch, views, 3, generator=g))
    K = G.intrinsics(10 + 30 * torch.rand(batch, views, generator=g), H, W)
    frame = G.look_at(torch.randn(3, generator=g) * 2, torch.randn(3, generator=g))  # a rigid change of world frame
    spec = [{'type': name, **options}] + ([companion] if companion else [])
    torch.manual_seed(seed)
    model = MultiViewTransformer(
        encoding=spec,
        img_size=(train[0] * patch, train[1] * patch),
        patch_size=patch,
        embed_dim=32,
        depth=1,
        num_heads=2,
    ).eval()
    set_strategy(model, data)
    images = torch.rand(batch, views, 3, H, W, generator=g)
    invariance = None
    # gta's and prope's logits see relative poses only; relative plucker / petr see poses relative to the first view
    if name in CAMERA_ROTARY or options.get('relative'):

        def invariance(inputs):
            return (inputs[0], inputs[1], frame @ inputs[2])

    return Case(model, (images, K, poses), (batch, 3), (batch, views * h * w, 32), invariance)


def video_case(name: str, data) -> Case:
    """The space-time ViT on a clip of any tubelet grid, trained on another."""
    batch = data.draw(st.integers(1, 2), label='batch')
    tubelet = data.draw(st.sampled_from([1, 2]), label='tubelet')
    patch = data.draw(st.sampled_from([2, 4]), label='patch')
    train = data.draw(st.tuples(*[st.integers(1, 4)] * 3), label='training grid (t, h, w)')
    t, h, w = data.draw(st.tuples(*[st.integers(1, 6)] * 3), label='grid (t, h, w)')
    num_heads = data.draw(st.sampled_from([1, 2, 4]), label='heads')  # head dims 48, 24, 12
    pool = data.draw(st.sampled_from(['token', 'avg']), label='global_pool')
    options = data.draw(encoding_options(name), label='options')
    torch.manual_seed(data.draw(seeds, label='seed'))
    model = VideoTransformer(
        num_classes=5,
        encoding={'type': name, **options},
        img_size=(train[1] * patch, train[2] * patch),
        num_frames=train[0] * tubelet,
        patch_size=patch,
        tubelet_size=tubelet,
        embed_dim=48,
        depth=1,
        num_heads=num_heads,
        global_pool=pool,
    ).eval()
    set_strategy(model, data)
    clips = torch.randn(batch, 3, t * tubelet, h * patch, w * patch)
    return Case(model, (clips,), (batch, 5), (batch, 1 + t * h * w, 48))


def build_case(name: str, data) -> Case:
    cls = encoding_class(name)
    if cls.needs_cameras:
        return camera_case(name, data)
    if 2 in cls.ndims:
        return vit_case(name, data)
    if cls.needs_grid:  # video token grids only
        return video_case(name, data)
    return point_case(name, data)


def test_every_encoding_is_fuzzed() -> None:
    """Every registered encoding has a backbone fuzzer, and every rotary one a relative-property test below."""
    assert set(IMAGE) | set(POINT) | set(CAMERA) | set(VIDEO) == set(vispe.list_encodings())
    rotary = {n for n in vispe.list_encodings() if 'rotate' in encoding_class(n).hooks()}
    assert rotary == RELATIVE_TESTED, f'rotary encodings without a relative-property test: {rotary - RELATIVE_TESTED}'


def check_output(name: str, what: str, out: torch.Tensor, shape: tuple, dtype: torch.dtype) -> None:
    assert tuple(out.shape) == shape, f'{name}: {what} has shape {tuple(out.shape)}, expected {shape}'
    assert out.dtype == dtype, f'{name}: {what} is {out.dtype}, expected {dtype}'
    assert torch.isfinite(out.float()).all(), f'{name}: {what} is not finite'


@pytest.mark.parametrize('name', vispe.list_encodings())
@fuzz(25)
@given(data=st.data())
def test_backbone_outputs_have_the_right_shape_and_are_finite(name: str, data) -> None:
    """Features and outputs: shapes, finite values and gradients; the last sample alone gives its row of the batch
    (after the model ran other grids); relative / normalised encodings ignore what they must; bf16 autocast is
    finite and near float32."""
    case = build_case(name, data)
    model, inputs = case.model, case.inputs
    feats = model.forward_features(*inputs)
    check_output(name, 'features', feats, case.feat_shape, torch.float32)
    out = model(*inputs)
    check_output(name, 'output', out, case.out_shape, torch.float32)
    (out.square().sum() + feats.square().mean()).backward()
    for pname, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), f'{name}: non-finite gradient in {pname}'

    with torch.no_grad():
        if case.extra is not None:
            case.extra()
        # the last sample alone, after whatever else the model ran: no dependence on the batch nor on caches
        alone = model(*(i[-1:] for i in inputs))
        torch.testing.assert_close(alone, out[-1:].detach(), atol=1e-4, rtol=1e-4, msg=lambda m: f'{name}: {m}')
        if case.invariance is not None:
            moved = model(*case.invariance(inputs))
            torch.testing.assert_close(moved, out.detach(), atol=2e-4, rtol=1e-3, msg=lambda m: f'{name}: {m}')
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out16 = model(*inputs)
        check_output(name, 'bf16 autocast output', out16, case.out_shape, torch.bfloat16)
        err = (out16.float() - out).abs().max().item()
        assert err <= 0.05 + 0.05 * out.abs().max().item(), f'{name}: bf16 autocast output is {err:.3f} off float32'


@pytest.mark.parametrize('name', VIDEO)
@fuzz(8)
@given(data=st.data())
def test_video_backbone_outputs_are_finite_at_any_clip_size(name: str, data) -> None:
    """Every video encoding (the image ones' 3D forms included) in the space-time ViT: shapes, finite values and
    gradients, and the last clip alone gives its row of the batch."""
    case = video_case(name, data)
    out = case.model(*case.inputs)
    check_output(name, 'output', out, case.out_shape, torch.float32)
    out.square().sum().backward()
    for pname, p in case.model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), f'{name}: non-finite gradient in {pname}'
    with torch.no_grad():
        alone = case.model(case.inputs[0][-1:])
    torch.testing.assert_close(alone, out[-1:].detach(), atol=1e-4, rtol=1e-4, msg=lambda m: f'{name}: {m}')


@pytest.mark.parametrize('name', IMAGE)
@fuzz(8)
@given(data=st.data())
def test_vit_trains_on_rpe2d_sampled_positions(name: str, data) -> None:
    """Training mode with rpe2d positions drawn from an enlarged range (and comrope's jitter when drawn): outputs
    of the right shape, finite, with finite gradients."""
    case = build_case(name, data)
    h, w = case.grid
    extra = data.draw(st.tuples(st.integers(0, 24), st.integers(0, 24)), label='rpe2d enlargement')
    model = case.model.train()
    model.position_sampler = RPE2D((h + extra[0], w + extra[1]))
    out = model(*case.inputs)
    check_output(name, 'training output', out, case.out_shape, torch.float32)
    out.square().sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), f'{name}: non-finite gradient in {pname}'


#: every encoding in a model cast to bf16 or float64 (lff's MLP input and float64 rotary tables were found here)
CAST_PARAMS = [
    pytest.param(name, dtype, id=f'{name}-{str(dtype).split(".")[-1]}')
    for name in vispe.list_encodings()
    for dtype in (torch.bfloat16, torch.float64)
]


@pytest.mark.parametrize('name,dtype', CAST_PARAMS)
@fuzz(4)
@given(data=st.data())
def test_backbone_cast_to_another_dtype_runs(name: str, dtype: torch.dtype, data) -> None:
    """model.to(dtype) with inputs in that dtype: outputs in that dtype, finite, close to float32 for float64.

    The cast model runs first, before anything has filled the encodings' grid-table caches."""
    case = build_case(name, data)
    reference = copy.deepcopy(case.model)
    with torch.no_grad():
        out = case.model.to(dtype)(*(i.to(dtype) if i.is_floating_point() else i for i in case.inputs))
        ref = reference(*case.inputs)
    check_output(name, f'{dtype} model output', out, case.out_shape, dtype)
    # bf16 weights quantise learned frequencies too (rope_mixed, rope3d mixed): at large coordinates the angles move
    # by up to 2^-8 of themselves, so a bf16 model is only roughly the float32 one
    tol = 1e-3 if dtype == torch.float64 else 0.2 + 0.2 * ref.abs().max().item()
    assert (out.float() - ref).abs().max() <= tol, f'{name}: the {dtype} model is far from float32'


# --- hooks: relative properties ------------------------------------------------------------------------------------
qk_dtypes = st.sampled_from([torch.float32, torch.bfloat16])
#: logits may move by eps * |q_i| |k_j| (rounding of the rotated q, k)
EPS = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def patch_logits(q2: torch.Tensor, k2: torch.Tensor, num_prefix: int) -> torch.Tensor:
    return q2[..., num_prefix:, :].float() @ k2[..., num_prefix:, :].float().transpose(-1, -2)


def assert_logits_match(name: str, got, want, q2, k2, dtype, what: str) -> None:
    """got == want up to the rounding of the rotated q and k (relative to the largest |q_i| |k_j|)."""
    scale = q2.float().norm(dim=-1).amax() * k2.float().norm(dim=-1).amax()
    err = (got - want).abs().max().item()
    assert err <= EPS[dtype] * scale.item() + 1e-6, f'{name}: {what} moved by {err:.2e} (|q||k| up to {scale:.1f})'


def assert_moves(name: str, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """The property is not vacuous: the rotation itself depends on the absolute positions."""
    diff = (a.float() - b.float()).abs().max().item()
    assert diff > 1e-3 * b.float().abs().max().item(), f'{name}: {what} ignores the positions (diff {diff:.1e})'


def shifts(ndim: int, bound: int = 60) -> st.SearchStrategy:
    """Integer shifts with at least one non-zero axis, optionally plus a fraction: a tuple of ndim floats."""
    ints = st.tuples(*[st.integers(-bound, bound)] * ndim).filter(lambda t: any(t))
    frac = st.tuples(*[st.floats(0, 1, exclude_max=True)] * ndim)
    return st.tuples(ints, st.one_of(st.just((0.0,) * ndim), frac)).map(
        lambda it: tuple(float(i) + f for i, f in zip(*it))
    )


def image_positions(data, h: int, w: int, num_prefix: int, batch: int) -> Positions:
    """The h x w grid, or per-sample rpe2d positions drawn from an enlarged range (both as backbones give them)."""
    pos = grid_positions(h, w, num_prefix)
    if data.draw(st.booleans(), label='rpe2d-sampled positions'):
        extra = data.draw(st.tuples(st.integers(0, 20), st.integers(0, 20)), label='rpe2d enlargement')
        pos = RPE2D((h + extra[0], w + extra[1]))(pos, batch)
    return pos


def shifted(pos: Positions, t: tuple) -> Positions:
    """The same tokens moved by t: same grid (and extent), no cache key (the coords are not the grid's), and the same
    forward pass's random draws (rope_dinov3's augmentation in training)."""
    coords = pos.coords + torch.tensor(t, dtype=pos.coords.dtype)
    return Positions(coords, grid=pos.grid, num_prefix=pos.num_prefix, extent=pos.extent, draws=pos.draws)


def randomize(enc: torch.nn.Module, std: float) -> None:
    """A trained-looking state: every parameter random (rope_mixed frequencies, harope mixing, comrope P, theta)."""
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=std)


@pytest.mark.parametrize('name', GRID_ROTARY)
@fuzz(50)
@given(data=st.data())
def test_grid_rotary_patch_logits_depend_only_on_offsets(name: str, data) -> None:
    """rope_axial, rope_mixed, harope, rope_dinov3: shifting every token by t leaves the patch-patch logits as they
    are, for any resolution strategy (its scales come from the grid, which a shift keeps), on a grid or rpe2d-sampled
    positions (rope_dinov3 in training mode: its augmentation drawn once for both). All but harope leave prefix
    tokens untouched and keep norms (strategy none / interpolate / ntk)."""
    h, w = data.draw(grids, label='grid')
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 3), label='heads')
    head_dim = data.draw(st.sampled_from([4, 8, 16, 32]), label='head dim')
    num_prefix = data.draw(st.integers(0, 3), label='prefix tokens')
    train = data.draw(st.tuples(st.integers(1, 16), st.integers(1, 16)), label='training grid')
    dtype = data.draw(qk_dtypes, label='q/k dtype')
    t = data.draw(shifts(2), label='shift')
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding(name, dim=heads * head_dim, num_heads=heads, grid_size=train)
    if name not in ('rope_axial', 'rope_dinov3'):  # rope_dinov3 has no parameters either
        randomize(enc, 0.5 if name == 'rope_mixed' else 0.3)
    strategy = set_strategy(enc, data)
    pos = image_positions(data, h, w, num_prefix, batch)
    n = num_prefix + h * w
    q, k = torch.randn(batch, heads, n, head_dim).to(dtype), torch.randn(batch, heads, n, head_dim).to(dtype)

    q2, k2 = enc.rotate(q, k, pos)
    assert q2.dtype == k2.dtype == dtype and q2.shape == q.shape, f'{name}: rotate gave {q2.dtype} {q2.shape}'
    q3, k3 = enc.rotate(q, k, shifted(pos, t))
    want = patch_logits(q2, k2, num_prefix)
    assert_logits_match(name, patch_logits(q3, k3, num_prefix), want, q2, k2, dtype, f'patch logits ({strategy})')
    assert_moves(name, q3[..., num_prefix:, :], q2[..., num_prefix:, :], 'the rotated q')
    # yarn multiplies q and k by one scale after the rotation, prefix tokens included; the others by 1
    yarn = 1.0 if name == 'rope_dinov3' else enc.mscale(enc.axis_scales(pos.coords, pos.grid))
    assert yarn == 1.0 or strategy in ('yarn', 'yarn_paper'), f'{name}: {strategy} scales q and k by {yarn}'
    if name == 'harope':  # M and M^-T cancel between prefix tokens, which RoPE leaves unrotated
        torch.testing.assert_close(
            q2[..., :num_prefix, :].float() @ k2[..., :num_prefix, :].float().transpose(-1, -2),
            q[..., :num_prefix, :].float() @ k[..., :num_prefix, :].float().transpose(-1, -2) * yarn**2,
            atol=EPS[dtype] * 10 * head_dim,
            rtol=EPS[dtype] * 10,
            msg=lambda m: f'{name}: prefix-prefix logits changed: {m}',
        )
    else:  # prefix tokens unrotated, norms kept, up to yarn's scaling
        torch.testing.assert_close(
            q2[..., :num_prefix, :].float(),
            q[..., :num_prefix, :].float() * yarn,
            atol=1e-6,
            rtol=EPS[dtype],
            msg=lambda m: f'{name}: a prefix token was rotated: {m}',
        )
        torch.testing.assert_close(
            q2.float().norm(dim=-1),
            q.float().norm(dim=-1) * yarn,
            atol=1e-4,
            rtol=EPS[dtype],
            msg=lambda m: f'{name}: rotation changed norms: {m}',
        )


@pytest.mark.parametrize('name', COMROPE)
@fuzz(50)
@given(data=st.data())
def test_comrope_logits_depend_only_on_offsets_on_a_fixed_grid(name: str, data) -> None:
    """ComRoPE normalises grid coordinates by the grid's extent (``pos.span``), so it is relative to shifts of the
    coordinates that keep the grid: patch logits unchanged, prefix tokens untouched, norms kept. Without a grid
    (per-sample min-max) any shift of a sample leaves every logit unchanged."""
    h, w = data.draw(grids, label='grid')
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 2), label='heads')
    block = data.draw(st.sampled_from([2, 4, 8]), label='block size')
    head_dim = block * 2 * data.draw(st.integers(1, 2), label='blocks per axis')  # AP: whole blocks per axis
    num_prefix = data.draw(st.integers(0, 3), label='prefix tokens')
    dtype = data.draw(qk_dtypes, label='q/k dtype')
    t = data.draw(shifts(2), label='shift')
    on_grid = data.draw(st.booleans(), label='on a grid')
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding({'type': name, 'block_size': block}, dim=heads * head_dim, num_heads=heads)
    randomize(enc, 1.0)
    if on_grid:
        pos = image_positions(data, h, w, num_prefix, batch)
    else:  # points in the plane, per sample: min-max normalised
        extent = data.draw(st.sampled_from([0.1, 1.0, 30.0]), label='point extent')
        pos = Positions(torch.rand(batch, h * w, 2) * extent, num_prefix=num_prefix)
        t = tuple(v * extent / 10 for v in t)  # a shift of a few extents (more would only cancel float digits)
    n = num_prefix + h * w
    q, k = torch.randn(batch, heads, n, head_dim).to(dtype), torch.randn(batch, heads, n, head_dim).to(dtype)

    q2, k2 = enc.rotate(q, k, pos)
    assert q2.dtype == dtype and q2.shape == q.shape, f'{name}: rotate gave {q2.dtype} {tuple(q2.shape)}'
    q3, k3 = enc.rotate(q, k, shifted(pos, t))
    assert_logits_match(
        name, patch_logits(q3, k3, num_prefix), patch_logits(q2, k2, num_prefix), q2, k2, dtype, 'patch logits'
    )
    if on_grid:
        assert_moves(name, q3[..., num_prefix:, :], q2[..., num_prefix:, :], 'the rotated q')
    assert torch.equal(q2[..., :num_prefix, :], q[..., :num_prefix, :]), f'{name}: a prefix token was rotated'
    torch.testing.assert_close(
        q2.float().norm(dim=-1), q.float().norm(dim=-1), atol=1e-4, rtol=EPS[dtype], msg=lambda m: f'{name}: {m}'
    )


@pytest.mark.parametrize('name', STRING)
@fuzz(40)
@given(data=st.data())
def test_string_logits_depend_only_on_offsets(name: str, data) -> None:
    """STRING (Cayley, Circulant) in a trained-looking state, on an image grid or a 3D cloud: any shift of the
    positions leaves the patch logits as they are (every logit with the centroid prefix), prefix-prefix logits are
    q . k (P is orthogonal and RoPE leaves them unrotated) and norms are kept."""
    ndim = data.draw(st.sampled_from([2, 3]), label='ndim')
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 3), label='heads')
    head_dim = data.draw(st.sampled_from([4, 8, 16, 32] if ndim == 2 else [6, 12, 24]), label='head dim')
    num_prefix = data.draw(st.integers(0, 2), label='prefix tokens')
    options = data.draw(encoding_options(name), label='options')
    dtype = data.draw(qk_dtypes, label='q/k dtype')
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding({'type': name, **options}, dim=heads * head_dim, num_heads=heads, ndim=ndim)
    randomize(enc, 0.3)
    if ndim == 2:
        h, w = data.draw(grids, label='grid')
        pos = image_positions(data, h, w, num_prefix, batch)
        moved = shifted(pos, data.draw(shifts(2), label='shift'))
    else:
        pos = Positions(torch.randn(batch, data.draw(st.integers(1, 100), label='points'), 3), num_prefix=num_prefix)
        moved = Positions(pos.coords + torch.randn(3) * 5, num_prefix=num_prefix)
    n = num_prefix + pos.coords.shape[-2]
    q, k = torch.randn(batch, heads, n, head_dim).to(dtype), torch.randn(batch, heads, n, head_dim).to(dtype)

    q2, k2 = enc.rotate(q, k, pos)
    q3, k3 = enc.rotate(q, k, moved)
    assert q2.dtype == dtype and q2.shape == q.shape, f'{name}: rotate gave {q2.dtype} {tuple(q2.shape)}'
    skip = 0 if enc.prefix == 'centroid' else num_prefix
    assert_logits_match(name, patch_logits(q3, k3, skip), patch_logits(q2, k2, skip), q2, k2, dtype, 'logits')
    if enc.prefix == 'none' and num_prefix:
        want = q[..., :num_prefix, :].float() @ k[..., :num_prefix, :].float().transpose(-1, -2)
        assert_logits_match(
            name,
            patch_logits(q2[..., :num_prefix, :], k2[..., :num_prefix, :], 0),
            want,
            q2,
            k2,
            dtype,
            'prefix-prefix logits',
        )
    torch.testing.assert_close(
        q2.float().norm(dim=-1), q.float().norm(dim=-1), atol=1e-4, rtol=EPS[dtype] * 2, msg=lambda m: f'{name}: {m}'
    )


@fuzz(50)
@given(data=st.data())
def test_liere_logits_are_relative_where_its_generators_commute(data) -> None:
    """LieRE's dense generators do not commute, so its logits are relative only where they do: on a 1 x n or n x 1
    grid shifted along it (one generator: exp(s A)^T exp(t A) = exp((t - s) A)) for every block size, and on any grid
    under any shift for b = 2 (2 x 2 skew blocks commute: RoPE-Mixed). Prefix tokens untouched, norms kept. Shifts of
    a few tokens: on a 2-token axis a shift of 3 is 3 normalised units, and the exponentials' float32 error grows with
    the generators' norm times the position."""
    block = data.draw(st.sampled_from([2, 4, 8]), label='block size')
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 2), label='heads')
    head_dim = block * data.draw(st.integers(1, 2), label='blocks per head')
    num_prefix = data.draw(st.integers(0, 3), label='prefix tokens')
    dtype = data.draw(qk_dtypes, label='q/k dtype')
    if block == 2 and data.draw(st.booleans(), label='a 2D grid'):
        (h, w), t = data.draw(grids, label='grid'), data.draw(shifts(2, bound=3), label='shift')
    else:
        n, axis = data.draw(st.integers(1, MAX_GRID), label='tokens'), data.draw(st.integers(0, 1), label='axis')
        step = data.draw(shifts(1, bound=3), label='shift')[0]
        (h, w), t = ((1, n), (0.0, step)) if axis else ((n, 1), (step, 0.0))
    train = data.draw(st.sampled_from([None, (h, w), (4, 4)]), label='training grid')
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding(
        {'type': 'liere', 'block_size': block, 'grid_size': train}, dim=heads * head_dim, num_heads=heads
    )
    randomize(enc, 0.5)
    pos = grid_positions(h, w, num_prefix)
    n_tokens = num_prefix + h * w
    q, k = (torch.randn(batch, heads, n_tokens, head_dim).to(dtype) for _ in range(2))
    q2, k2 = enc.rotate(q, k, pos)
    assert q2.dtype == dtype and q2.shape == q.shape, f'liere: rotate gave {q2.dtype} {tuple(q2.shape)}'
    q3, k3 = enc.rotate(q, k, shifted(pos, t))
    got, want = patch_logits(q3, k3, num_prefix), patch_logits(q2, k2, num_prefix)
    assert_logits_match('liere', got, want, q2, k2, dtype, 'patch logits')
    assert_moves('liere', q3[..., num_prefix:, :], q2[..., num_prefix:, :], 'the rotated q')
    assert torch.equal(q2[..., :num_prefix, :], q[..., :num_prefix, :]), 'liere: a prefix token was rotated'
    torch.testing.assert_close(
        q2.float().norm(dim=-1), q.float().norm(dim=-1), atol=1e-4, rtol=EPS[dtype], msg=lambda m: f'liere: {m}'
    )


@fuzz(50)
@given(data=st.data())
def test_rope3d_logits_ignore_translations(data) -> None:
    """rope3d on any cloud, any translation: patch logits unchanged; with the centroid prefix the cls logits too;
    with prefix 'none' the prefix tokens are left as they are."""
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 3), label='heads')
    head_dim = data.draw(st.sampled_from([6, 8, 12, 16, 24, 64]), label='head dim')
    num_points = data.draw(st.integers(1, 200), label='points')
    num_prefix = data.draw(st.integers(0, 2), label='prefix tokens')
    options = data.draw(encoding_options('rope3d'), label='options')
    dtype = data.draw(qk_dtypes, label='q/k dtype')
    scale = data.draw(st.sampled_from([0.1, 1.0, 3.0]), label='cloud scale')
    t = torch.tensor(data.draw(st.tuples(*[st.floats(-10, 10)] * 3), label='translation'))
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding({'type': 'rope3d', **options}, dim=heads * head_dim, num_heads=heads, ndim=3)
    coords = torch.randn(batch, num_points, 3) * scale
    n = num_prefix + num_points
    q, k = torch.randn(batch, heads, n, head_dim).to(dtype), torch.randn(batch, heads, n, head_dim).to(dtype)

    q2, k2 = enc.rotate(q, k, Positions(coords, num_prefix=num_prefix))
    q3, k3 = enc.rotate(q, k, Positions(coords + t, num_prefix=num_prefix))
    assert q2.dtype == dtype and q2.shape == q.shape, f'rope3d: rotate gave {q2.dtype} {tuple(q2.shape)}'
    # every logit (prefix included) with the centroid; patch-patch ones otherwise
    skip = num_prefix if options['prefix'] == 'none' else 0
    assert_logits_match('rope3d', patch_logits(q3, k3, skip), patch_logits(q2, k2, skip), q2, k2, dtype, 'logits')
    if t.abs().max() * options['freq_scale'] > 0.1:
        assert_moves('rope3d', q3[..., num_prefix:, :], q2[..., num_prefix:, :], 'the rotated q')
    if options['prefix'] == 'none':
        assert torch.equal(q2[..., :num_prefix, :], q[..., :num_prefix, :]), 'rope3d: a prefix token was rotated'
    torch.testing.assert_close(
        q2.float().norm(dim=-1), q.float().norm(dim=-1), atol=1e-4, rtol=EPS[dtype], msg=lambda m: f'rope3d: {m}'
    )


@pytest.mark.parametrize('name', CAMERA_ROTARY)
@fuzz(40)
@given(data=st.data())
def test_camera_block_logits_and_attention_ignore_the_world_frame(name: str, data) -> None:
    """gta and prope: logits q^T rho(g_q)^-1 rho(g_k) k are unchanged by a rigid change of world frame and by shifting
    every patch position; with transformed values the attention output is unchanged too. Moving one camera changes
    them."""
    batch, views = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 3), label='views')
    h, w = data.draw(st.tuples(st.integers(1, 8), st.integers(1, 8)), label='grid per view')
    heads = data.draw(st.integers(1, 2), label='heads')
    head_dims = [4, 8, 12, 16, 24] if name == 'gta' else [8, 16, 24]  # prope: 4-channel blocks and two axes of pairs
    head_dim = data.draw(st.sampled_from(head_dims), label='head dim')
    num_prefix = data.draw(st.integers(0, 2), label='prefix tokens')
    options = data.draw(encoding_options(name), label='options')
    if name == 'gta':
        options['translation_scale'] = data.draw(st.sampled_from([0.01, 0.3, 1.0]), label='translation scale')
    t = data.draw(shifts(2, bound=20), label='patch shift')
    seed = data.draw(seeds, label='seed')
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    dim = heads * head_dim
    enc = vispe.build_encoding({'type': name, **options}, dim=dim, num_heads=heads, ndim=2, patch_size=4)
    eye = torch.nn.functional.normalize(torch.randn(batch, views, 3, generator=g), dim=-1) * 3.5
    poses = G.look_at(eye, 0.2 * torch.randn(batch, views, 3, generator=g))
    K = G.intrinsics(10 + 30 * torch.rand(batch, views, generator=g), 4 * h, 4 * w)
    frame = G.look_at(torch.randn(3, generator=g) * 3, torch.randn(3, generator=g))

    def positions(poses, shift=(0.0, 0.0)):
        cameras = Cameras(K, poses, torch.arange(views).repeat_interleave(h * w), (4 * h, 4 * w), 4)
        coords = grid_coords(h, w).repeat(views, 1) + torch.tensor(shift)
        return Positions(coords, num_prefix=num_prefix, cameras=cameras)

    n = num_prefix + views * h * w
    q, k = torch.randn(batch, heads, n, head_dim), torch.randn(batch, heads, n, head_dim)
    q2, k2 = enc.rotate(q, k, positions(poses))
    q3, k3 = enc.rotate(q, k, positions(frame @ poses, t))
    want = patch_logits(q2, k2, num_prefix)
    assert_logits_match(name, patch_logits(q3, k3, num_prefix), want, q2, k2, torch.float32, 'patch logits')
    # prefix tokens have no camera: the identity, so their logits with each other are q . k
    torch.testing.assert_close(
        q2[..., :num_prefix, :] @ k2[..., :num_prefix, :].transpose(-1, -2),
        q[..., :num_prefix, :] @ k[..., :num_prefix, :].transpose(-1, -2),
        msg=lambda m: f'{name}: prefix-prefix logits changed: {m}',
    )
    if not num_prefix:  # (prefix-patch logits are absolute, as for rope_axial: the multi-view model has no prefix)
        attn = Attention(dim, heads, qkv_bias=True, encodings={name: enc}).eval()
        x = torch.randn(batch, n, dim)
        torch.testing.assert_close(
            attn(x, positions(frame @ poses, t)),
            attn(x, positions(poses)),
            atol=1e-4,
            rtol=1e-3,
            msg=lambda m: f'{name}: attention output changed with the world frame: {m}',
        )
    if views > 1 and enc.se3_dims:  # turn camera 1 about its optical axis: logits between views change
        turn = torch.eye(4)
        turn[:2, :2] = torch.tensor([[0.0, -1.0], [1.0, 0.0]])
        moved = poses.clone()
        moved[:, 1] = poses[:, 1] @ turn
        q4, k4 = enc.rotate(q, k, positions(moved))
        assert_moves(name, patch_logits(q4, k4, num_prefix), want, 'the logits between views')


@fuzz(30)
@given(data=st.data())
def test_irpe_terms_depend_only_on_offsets(data) -> None:
    """iRPE buckets offsets: integer shifts of every token leave its logit bias and value term exactly as they are."""
    h, w = data.draw(grids, label='grid')
    batch, heads = data.draw(st.integers(1, 2), label='batch'), data.draw(st.integers(1, 2), label='heads')
    num_prefix = data.draw(st.integers(0, 3), label='prefix tokens')
    options = data.draw(encoding_options('irpe'), label='options')
    t = data.draw(st.tuples(st.integers(-60, 60), st.integers(-60, 60)).filter(any), label='integer shift')
    torch.manual_seed(data.draw(seeds, label='seed'))
    enc = vispe.build_encoding({'type': 'irpe', **options}, dim=8 * heads, num_heads=heads)
    randomize(enc, 1.0)
    pos = image_positions(data, h, w, num_prefix, batch)
    n = num_prefix + h * w
    q, k, v = (torch.randn(batch, heads, n, 8) for _ in range(3))
    moved = shifted(pos, t)
    if 'logit_bias' in enc.active_hooks():
        bias = enc.logit_bias(q, k, pos)
        assert bias.shape[-2:] == (n, n) and torch.isfinite(bias).all(), f'irpe: bias {tuple(bias.shape)}'
        assert torch.equal(enc.logit_bias(q, k, moved), bias), 'irpe: the logit bias changed under a shift'
    if 'value_term' in enc.active_hooks():
        attn = torch.rand(batch, heads, n, n).softmax(-1)
        term = enc.value_term(v, pos, attn)
        assert term.shape == v.shape and torch.isfinite(term).all(), f'irpe: value term {tuple(term.shape)}'
        assert torch.equal(enc.value_term(v, moved, attn), term), 'irpe: the value term changed under a shift'
