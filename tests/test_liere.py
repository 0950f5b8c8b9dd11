"""LieRE: parity with the authors' rotation (StanfordMIMI/LieRE, models/rope_vit.py) on equal parameters, and the
properties that hold without commuting generators (R(0) = I, orthogonality, relative along one axis) and the one
that does not (two axes)."""

import math

import pytest
import torch

import vispe
from vispe.positions import Positions, grid_positions


def build(block_size=8, dim=32, num_heads=2, ndim=2, grid_size=None, seed=0):
    torch.manual_seed(seed)
    return vispe.build_encoding(
        {'type': 'liere', 'block_size': block_size, 'ndim': ndim, 'grid_size': grid_size}, dim=dim, num_heads=num_heads
    )


# --- the reference's forward, re-derived here from its code's conventions -----------------------------------------
def reference_positions(steps, train):
    """Per axis linspace(0, n / g, n), the axes' cartesian product, first axis slowest."""
    axes = [torch.linspace(0, n / g, n) for n, g in zip(steps, train)]
    return torch.stack(torch.meshgrid(*axes, indexing='ij'), -1).reshape(-1, len(steps))


def reference_rotate(x, raw, layer, positions, num_heads):
    """x (B, H, 1 + N, d) with a cls token first; raw (ndim, layers, H J, b, b) as the reference stores it.

    Its skew bases: the strict upper triangle of raw, minus 0.5 everywhere, minus its transpose. Token n's matrix:
    the sum over axes of position times basis, all layers at once; the cls token gets 0. Then matrix_exp, and
    layer ``layer``'s (H J) blocks, head-major, multiply the first J b channels of each head as column vectors."""
    upper = torch.triu(raw, diagonal=1) - 0.5
    bases = upper - upper.transpose(-1, -2)  # (ndim, L, HJ, b, b)
    gen = (positions[:, :, None, None, None, None] * bases[None]).sum(1)  # (N, L, HJ, b, b)
    gen = torch.cat([torch.zeros_like(gen[:1]), gen])  # the cls token's identity
    rot = torch.linalg.matrix_exp(gen)[:, layer]  # (1 + N, HJ, b, b); float32 in, as the reference computes it
    b = raw.shape[-1]
    rot = rot.unflatten(1, (num_heads, -1)).transpose(0, 1)  # (H, 1 + N, J, b, b)
    blocks = x.unflatten(-1, (-1, b))[..., None]  # (B, H, 1 + N, J, b, 1)
    return (rot @ blocks).squeeze(-1).flatten(-2)


def copy_reference(enc, raw, layer):
    """vispe's parameters from the reference's: layer ``layer``'s strict upper triangles, heads major."""
    b = raw.shape[-1]
    rows, cols = torch.triu_indices(b, b, 1)
    with torch.no_grad():
        enc.generators.copy_(raw[:, layer].unflatten(1, (enc.num_heads, -1))[..., rows, cols])


def rotate_both(block_size, grid, scale, dtype=torch.float32):
    """vispe's and the reference's q rotated on the same parameters: layer 1 of 3, training grid 4 x 4, generator
    entries U(0, scale pi) (the reference's init: scale 2); the reference in ``dtype``."""
    torch.manual_seed(1)
    num_heads, head_dim, layers = 2, 16, 3
    raw = torch.rand(2, layers, num_heads * head_dim // block_size, block_size, block_size) * scale * math.pi
    enc = build(block_size, dim=num_heads * head_dim, num_heads=num_heads, grid_size=(4, 4))
    copy_reference(enc, raw, layer=1)
    q = torch.randn(2, num_heads, 1 + grid[0] * grid[1], head_dim)
    q2, k2 = enc.rotate(q, q.flip(0), grid_positions(*grid, num_prefix=1))
    positions = reference_positions(grid, (4, 4)).to(dtype)
    expected = reference_rotate(q.to(dtype), raw.to(dtype), 1, positions, num_heads)
    torch.testing.assert_close(k2, q2.flip(0))  # k is rotated by the same table
    assert torch.equal(q2[:, :, 0], q[:, :, 0])  # the cls token: the identity, bit for bit
    return q2, expected


@pytest.mark.parametrize('block_size', [2, 4, 8])
@pytest.mark.parametrize('grid', [(4, 4), (3, 5), (6, 4)])
def test_equals_the_reference_on_equal_parameters(block_size, grid):
    """(4, 4) is the training grid; (3, 5) and (6, 4) use the reference's n / g scaling. Entries U(0, pi)."""
    q2, expected = rotate_both(block_size, grid, scale=1.0)
    torch.testing.assert_close(q2, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('block_size', [8, 16])
def test_at_the_reference_init_scale_float32_limits_both_alike(block_size):
    """Entries U(0, 2 pi) on a 6 x 4 grid (positions up to 1.5): generator norms near 100, ~8 squarings, so float32
    exponentials err by ~1e-5 in both codes. Against the reference evaluated in float64, vispe's error stays under
    5e-5 and within 4x the reference's own float32 error (measured: 2.3e-5 vs 0.9e-5 at b = 8)."""
    q2, exact = rotate_both(block_size, (6, 4), scale=2.0, dtype=torch.float64)
    _, ref32 = rotate_both(block_size, (6, 4), scale=2.0)
    ours, theirs = (q2.double() - exact).abs().amax().item(), (ref32.double() - exact).abs().amax().item()
    assert ours < 5e-5 and ours < 4 * theirs, (ours, theirs)


def test_equals_the_reference_on_a_volume():
    """ndim 3 (the reference's volumes: depth, rows, columns) at the training size, positions given off a grid:
    min-max to [0, 1] is the reference's linspace(0, 1, n) there."""
    torch.manual_seed(2)
    raw = torch.rand(3, 1, 2 * 2, 8, 8) * math.pi  # entries U(0, pi), as above
    enc = build(8, dim=32, num_heads=2, ndim=3)
    copy_reference(enc, raw, layer=0)
    steps = (2, 3, 4)
    cells = torch.stack(torch.meshgrid(*[torch.arange(s) for s in steps], indexing='ij'), -1).reshape(-1, 3)
    q = torch.randn(1, 2, 1 + cells.shape[0], 16)
    q2, _ = enc.rotate(q, q, Positions(coords=cells.float(), num_prefix=1))
    expected = reference_rotate(q, raw, 0, reference_positions(steps, steps), 2)
    torch.testing.assert_close(q2, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('block_size', [2, 4, 8])
def test_identity_at_zero_and_orthogonal(block_size):
    """R(0) = I; every R(x) orthogonal with det 1; q's norm kept per token and head."""
    enc = build(block_size)
    eye = torch.eye(block_size)
    torch.testing.assert_close(enc.rotation(torch.zeros(1, 2)), eye.expand(2, 1, 16 // block_size, -1, -1))
    rot = enc.rotation(torch.rand(7, 2) * 1.5)  # (H, N, J, b, b), at init (norms up to ~100: float32 to ~3e-5)
    torch.testing.assert_close(rot.transpose(-1, -2) @ rot, eye.expand_as(rot), atol=5e-5, rtol=0)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(rot.shape[:-2]), atol=1e-4, rtol=0)
    assert (rot - eye).abs().amax() > 0.1
    q = torch.randn(2, 2, 1 + 12, 16)
    q2, _ = enc.rotate(q, q, grid_positions(3, 4, num_prefix=1))
    torch.testing.assert_close(q2.norm(dim=-1), q.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_relative_along_one_axis():
    """One axis moving, the other at 0: exp(s A) exp(t A) = exp((s + t) A), so R(x)^T R(y) = R(y - x), and q . k on a
    1 x n row depends only on the column offset."""
    enc = build(8)
    s, t = torch.rand(5, 1) * 2, torch.rand(5, 1) * 2
    for axis in range(2):
        x, y = (torch.nn.functional.pad(v, (axis, 1 - axis)) for v in (s, t))
        rx, ry, rdiff = enc.rotation(x), enc.rotation(y), enc.rotation(y - x)
        torch.testing.assert_close(rx.transpose(-1, -2) @ ry, rdiff, atol=1e-4, rtol=1e-4)
    q, k = torch.randn(1, 2, 1, 16).expand(1, 2, 8, 16), torch.randn(1, 2, 1, 16).expand(1, 2, 8, 16)
    q2, k2 = enc.rotate(q, k, grid_positions(1, 8))
    logits = q2 @ k2.transpose(-1, -2)  # (1, H, 8, 8)
    for offset in range(-3, 4):
        diagonal = torch.diagonal(logits, offset, -2, -1)
        torch.testing.assert_close(diagonal, diagonal[..., :1].expand_as(diagonal), atol=1e-4, rtol=1e-4)


def test_two_axes_are_not_relative():
    """Dense generators do not commute, so R(x)^T R(y) != R(y - x) in 2D (the paper's v5 abstract speaks of relative
    and absolute information), and shifting a grid changes q . k; b = 2 (RoPE-Mixed) commutes and stays relative."""
    enc = build(8)
    a = enc.skew_generators()
    assert (a[0] @ a[1] - a[1] @ a[0]).abs().amax() > 1.0
    x, y = torch.rand(5, 2), torch.rand(5, 2)
    rx, ry, rdiff = enc.rotation(x), enc.rotation(y), enc.rotation(y - x)
    assert (rx.transpose(-1, -2) @ ry - rdiff).abs().amax() > 0.1
    pairs = build(2)
    rx, ry, rdiff = pairs.rotation(x), pairs.rotation(y), pairs.rotation(y - x)
    torch.testing.assert_close(rx.transpose(-1, -2) @ ry, rdiff, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('block_size', [2, 8])
def test_fast_path_equals_the_block_matrices(block_size):
    """b = 2 goes through the fused rotary kernel; it equals applying the 2 x 2 exponentials (prefix untouched)."""
    enc = build(block_size, grid_size=(3, 4))
    q = torch.randn(2, 2, 2 + 12, 16)
    pos = grid_positions(3, 4, num_prefix=2)
    q2, _ = enc.rotate(q, q, pos)
    rot = enc.rotation(enc.normalized_coords(pos), num_prefix=2)
    expected = (rot @ q.unflatten(-1, (-1, block_size))[..., None]).squeeze(-1).flatten(-2)
    torch.testing.assert_close(q2, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(q2[:, :, :2], q[:, :, :2])


def test_parameters_weight_decay_and_float32_under_autocast():
    enc = build(8)
    assert dict(enc.named_parameters())['generators'].shape == (2, 2, 2, 28)  # (ndim, H, J, b (b - 1) / 2)
    assert enc.no_weight_decay() == {'generators'}
    assert not enc.state_dict().keys() - {'generators'}  # the index buffers are not checkpoint entries
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert enc.rotation(torch.rand(3, 2)).dtype == torch.float32
    model = vispe.create_model('vit_tiny_patch16_224', encoding='liere', img_size=32, depth=2)
    encodings = [m for m in model.modules() if type(m).__name__ == 'LieRE']
    assert len(encodings) == 2 and encodings[0].train_grid == (2, 2)  # one per layer, the backbone's grid
    assert encodings[0].generators.data_ptr() != encodings[1].generators.data_ptr()


def test_bad_block_size():
    with pytest.raises(ValueError, match=r'liere: block_size must be >= 2 and divide the head dim 12'):
        vispe.build_encoding({'type': 'liere', 'block_size': 8}, dim=48, num_heads=4)
