"""ComRoPE-AP / -LD: the RoPE equation, commuting generators, the closed forms, relativity, prefix handling."""

import pytest
import torch

import vispe
from vispe.encodings.block_rotations import apply_blocks, isoclinic_frame, quaternion_matrices
from vispe.positions import Positions, grid_positions

VARIANTS = ['comrope_ap', 'comrope_ld']


def build(name, block_size=4, dim=32, num_heads=2, randomize=True, **kwargs):
    """head dim 16: divisible by 8 * 2 axes, so every block size works for both variants."""
    enc = vispe.build_encoding({'type': name, 'block_size': block_size, **kwargs}, dim=dim, num_heads=num_heads)
    if randomize:  # a trained-looking state: large, non-degenerate generators and multipliers
        torch.nn.init.normal_(enc.P, std=1.0)
        if name == 'comrope_ld':
            torch.nn.init.normal_(enc.theta, std=1.0)
    return enc


def logits(enc, q, k, pos):
    q2, k2 = enc.rotate(q, k, pos)
    n = pos.num_prefix
    return q2[..., n:, :] @ k2[..., n:, :].transpose(-1, -2)


@pytest.mark.parametrize('name', VARIANTS)
@pytest.mark.parametrize('block_size', [2, 4, 8])
def test_rope_equation(name, block_size):
    """R(x)^T R(y) = R(y - x) blockwise, and R is orthogonal."""
    enc = build(name, block_size)
    x, y = torch.rand(5, 2), torch.rand(5, 2)
    rx, ry, rdiff = enc.rotation(x), enc.rotation(y), enc.rotation(y - x)  # (H, N, J, b, b)
    assert rx.shape == (2, 5, 16 // block_size, block_size, block_size)
    torch.testing.assert_close(rx.transpose(-1, -2) @ ry, rdiff, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rx.transpose(-1, -2) @ rx, torch.eye(block_size).expand_as(rx), atol=1e-5, rtol=0)
    assert (rx - torch.eye(block_size)).abs().amax() > 0.1  # non-trivial rotations


@pytest.mark.parametrize('name', VARIANTS)
@pytest.mark.parametrize('block_size', [2, 4, 8])
def test_rotation_is_the_exponential_of_commuting_generators(name, block_size):
    enc = build(name, block_size)
    a = enc.generators()  # (ndim, H, J, b, b)
    torch.testing.assert_close(a, -a.transpose(-1, -2))
    torch.testing.assert_close(a[0] @ a[1], a[1] @ a[0], atol=1e-5, rtol=1e-5)
    x = torch.rand(6, 2)
    dense = torch.linalg.matrix_exp((x.T[:, None, :, None, None, None] * a[:, :, None]).sum(0))  # (H, N, J, b, b)
    torch.testing.assert_close(enc.rotation(x), dense, atol=1e-5, rtol=1e-5)  # b = 2, 4: closed forms


def test_generic_generators_would_not_commute():
    """What the shared-generator structure buys: two random skew blocks do not commute."""
    p = torch.randn(2, 4, 4)
    a, b = p - p.transpose(-1, -2)
    assert (a @ b - b @ a).abs().amax() > 0.1


def test_ap_with_block_size_2_is_a_rotation_per_pair():
    enc = build('comrope_ap', 2)
    x = torch.rand(7, 2)
    rot = enc.rotation(x)  # (H, N, J, 2, 2)
    omega = enc.P[..., 1, 0] - enc.P[..., 0, 1]  # (H, J)
    axis = torch.arange(8) % 2  # block j rotates with axis j mod 2 (row, col, row, ...)
    angle = x[:, axis] * omega[:, None]  # (H, N, J)
    expected = torch.stack([angle.cos(), -angle.sin(), angle.sin(), angle.cos()], -1).unflatten(-1, (2, 2))
    torch.testing.assert_close(rot, expected)


@pytest.mark.parametrize('name', VARIANTS)
@pytest.mark.parametrize('block_size', [2, 4, 8])
def test_fast_paths_match_the_block_matrices(name, block_size):
    """The complex (b = 2) and quaternion (b = 4) rotations equal applying the b x b blocks."""
    enc = build(name, block_size)
    q, k = torch.randn(2, 2, 3 + 12, 16), torch.randn(2, 2, 3 + 12, 16)
    pos = grid_positions(3, 4, num_prefix=3)
    q2, k2 = enc.rotate(q, k, pos)
    rot = enc.rotation(enc.normalized_coords(pos), num_prefix=3)
    torch.testing.assert_close(q2, apply_blocks(q, rot), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k2, apply_blocks(k, rot), atol=1e-5, rtol=1e-5)


def plane_rotations(angles):
    """(..., 2) angles -> (..., 4, 4): channels (0, 1) and (2, 3) rotated by each angle, as a complex multiplication."""
    cos, sin, zero = angles.cos(), angles.sin(), torch.zeros_like(angles[..., 0])
    rows = [
        [cos[..., 0], -sin[..., 0], zero, zero],
        [sin[..., 0], cos[..., 0], zero, zero],
        [zero, zero, cos[..., 1], -sin[..., 1]],
        [zero, zero, sin[..., 1], cos[..., 1]],
    ]
    return torch.stack([torch.stack(r, -1) for r in rows], -2)


@pytest.mark.parametrize(
    'left, right',
    [
        (None, None),  # random
        ([0.3, -1.2, 0.5], [0.0, 0.0, 0.0]),  # left-isoclinic only: the right part vanishes
        ([0.0, 0.0, 0.0], [2.0, 0.1, -0.4]),  # right-isoclinic only
        ([-1.3, 0.0, 0.0], [-0.7, 0.0, 0.0]),  # both axes exactly on -i: the turn's sign flip
        ([0.0, 1.0, 0.0], [0.0, 0.0, -2.0]),  # axes orthogonal to i: a 90-degree turn, either sign
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),  # S = 0: M = I, no rotation
    ],
)
def test_isoclinic_frame_diagonalises_the_exponential(left, right):
    """exp(t S) = M^T D(t omega) M for every skew 4 x 4 S (the b = 4 path), M orthogonal, against matrix_exp."""
    basis_left, basis_right = quaternion_matrices(torch.eye(4, dtype=torch.float64)[1:])  # L_i, L_j, L_k; R_...
    if left is None:
        p = torch.randn(5, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        gen = p - p.transpose(-1, -2)
    else:
        a, b = torch.tensor(left, dtype=torch.float64), torch.tensor(right, dtype=torch.float64)
        gen = (torch.einsum('m,mxy->xy', a, basis_left) + torch.einsum('m,mxy->xy', b, basis_right))[None]
    frame, rates = isoclinic_frame(gen)
    eye = torch.eye(4, dtype=torch.float64)
    torch.testing.assert_close(frame @ frame.transpose(-1, -2), eye.expand_as(frame))
    for t in (-2.5, -0.3, 0.0, 0.7, 4.0):
        rebuilt = frame.transpose(-1, -2) @ plane_rotations(t * rates) @ frame
        torch.testing.assert_close(rebuilt, torch.linalg.matrix_exp(t * gen))
    if left is not None and not any(left + right):
        torch.testing.assert_close(frame, eye[None])


@pytest.mark.parametrize('name', VARIANTS)
@pytest.mark.parametrize('block_size', [2, 4, 8])
def test_logits_depend_only_on_offsets(name, block_size):
    """With the grid fixed, shifting every raw coordinate shifts every normalised one by the same offset."""
    enc = build(name, block_size)
    q, k = torch.randn(2, 2, 1 + 12, 16), torch.randn(2, 2, 1 + 12, 16)
    base = grid_positions(3, 4, num_prefix=1)
    ref = logits(enc, q, k, base)
    assert (ref - q[..., 1:, :] @ k[..., 1:, :].transpose(-1, -2)).abs().max() > 1e-1  # positions matter
    for offset in ([3.0, -7.0], [0.25, 11.5]):
        shifted = Positions(base.coords + torch.tensor(offset), grid=(3, 4), num_prefix=1)
        torch.testing.assert_close(logits(enc, q, k, shifted), ref, atol=1e-4, rtol=1e-4)
    scaled = Positions(base.coords * 2, grid=(3, 4), num_prefix=1)  # not a shift: the logits change
    assert (logits(enc, q, k, scaled) - ref).abs().max() > 1e-2


@pytest.mark.parametrize('name', VARIANTS)
def test_prefix_tokens_untouched_and_bf16_finite(name):
    enc = build(name)
    q, k = torch.randn(2, 2, 2 + 9, 16), torch.randn(2, 2, 2 + 9, 16)
    pos = grid_positions(3, 3, num_prefix=2)
    q2, k2 = enc.rotate(q, k, pos)
    torch.testing.assert_close(q2[:, :, :2], q[:, :, :2])
    torch.testing.assert_close(k2[:, :, :2], k[:, :, :2])
    assert not torch.allclose(q2[:, :, 2:], q[:, :, 2:])
    with torch.autocast('cpu', dtype=torch.bfloat16):
        q16, k16 = enc.rotate(q.bfloat16(), k.bfloat16(), pos)
    assert q16.dtype == k16.dtype == torch.bfloat16 and torch.isfinite(q16.float()).all()
    assert (q16.float() - q2).abs().max() < 0.1


@pytest.mark.parametrize('block_size', [2, 4, 8])
@pytest.mark.parametrize('name', VARIANTS)
def test_prefix_position_turns_prefix_tokens_as_a_patch_there(name, block_size):
    """prefix_position=0.5 (the reference code's cls position): each prefix token is rotated as a token at the
    normalised position (0.5, 0.5); patches are as with the default."""
    torch.manual_seed(0)
    enc, centred = build(name, block_size), build(name, block_size, randomize=False, prefix_position=0.5)
    centred.load_state_dict(enc.state_dict())
    q, k = torch.randn(1, 2, 2 + 9, 16), torch.randn(1, 2, 2 + 9, 16)
    pos = grid_positions(3, 3, num_prefix=2)
    q2, k2 = centred.rotate(q, k, pos)
    q1, k1 = enc.rotate(q, k, pos)
    torch.testing.assert_close(q2[:, :, 2:], q1[:, :, 2:])
    centre = torch.full((2, 2), 0.5)
    q3, k3 = enc.rotate_normalized(q[:, :, :2], k[:, :, :2], centre)
    torch.testing.assert_close(q2[:, :, :2], q3, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(k2[:, :, :2], k3, atol=1e-6, rtol=1e-5)
    assert (q2[:, :, :2] - q[:, :, :2]).abs().max() > 1e-2
    with pytest.raises(ValueError, match='prefix_position'):
        build(name, prefix_position='centre')


def test_positions_are_normalised_and_jittered_in_training_only():
    enc = build('comrope_ap', jitter=True)
    pos = grid_positions(2, 4)
    x = enc.eval().normalized_coords(pos, batch=3)
    torch.testing.assert_close(x[[0, -1]], torch.tensor([[0.25, 0.125], [0.75, 0.875]]))
    jittered = enc.train().normalized_coords(pos, batch=3)
    assert jittered.shape == (3, 8, 2) and not torch.allclose(jittered[0], jittered[1])
    assert ((jittered - x).abs() <= torch.tensor([0.5 / 2, 0.5 / 4]) + 1e-6).all()  # at most half a patch
    q = torch.randn(1, 2, 8, 16).expand(3, -1, -1, -1)  # identical samples: only the jitter differs
    for block_size in (2, 4, 8):  # per-sample positions through every rotation path
        q2, _ = build('comrope_ld', block_size, jitter=True).train().rotate(q, q, pos)
        assert q2.shape == q.shape and not torch.allclose(q2[0], q2[1])
    points = Positions(torch.tensor([[[2.0, -1.0], [4.0, 3.0], [3.0, 1.0]]]))  # no grid: min-max per sample
    torch.testing.assert_close(enc.eval().normalized_coords(points), torch.tensor([[[0, 0], [1, 1], [0.5, 0.5]]]))


def test_bad_block_sizes_are_explained():
    with pytest.raises(ValueError, match='divisible by 16'):
        vispe.build_encoding({'type': 'comrope_ap', 'block_size': 8}, dim=48, num_heads=4)  # head dim 12
    with pytest.raises(ValueError, match='block_size must be one of'):
        vispe.build_encoding({'type': 'comrope_ld', 'block_size': 3}, dim=48, num_heads=4)


@pytest.mark.parametrize('name', VARIANTS)
def test_runs_in_a_vit_at_two_resolutions(name):
    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding=name, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
        num_classes=5,
    )  # fmt: skip
    for size in [(32, 32), (48, 64)]:
        out = model(torch.randn(2, 3, *size))
        assert out.shape == (2, 5) and torch.isfinite(out).all()
        out.sum().backward()
    assert model.blocks[0].attn.pe[name].P.grad.abs().sum() > 0


@pytest.mark.parametrize('transpose', [False, True])
def test_one_gemm_transform_equals_the_per_head_products(transpose: bool) -> None:
    """transform_heads' CUDA form (one GEMM with the heads' matrices on a C x C diagonal) gives the per-head bmm's
    values, on timm's token-major q and on a contiguous one, and keeps the token-major layout."""
    from vispe.encodings.block_rotations import transform_heads

    torch.manual_seed(0)
    B, N, H, d = 2, 5, 3, 8
    dense = torch.randn(H, d, d)
    token_major = torch.randn(B, N, 3, H, d).permute(2, 0, 3, 1, 4)[0]
    for x in (token_major, token_major.contiguous()):
        per_head = transform_heads(x, dense, transpose, one_gemm=False)
        one = transform_heads(x, dense, transpose, one_gemm=True)
        torch.testing.assert_close(one, per_head, atol=1e-5, rtol=1e-5)
        expected = torch.einsum('hij,bhnj->bhni', dense.mT if transpose else dense, x)
        torch.testing.assert_close(one, expected, atol=1e-5, rtol=1e-5)
        assert one.transpose(1, 2).is_contiguous()
