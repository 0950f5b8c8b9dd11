"""STRING (Schenck et al., ICML 2025): Cayley-STRING equals its RoPE at init bit for bit (rope_axial, rope_mixed,
rope3d), its P is orthogonal, Circulant-STRING equals exp(sum_i x_i L_i) of its commuting skew circulants, logits
depend only on position differences in 2D and 3D, and fold_string leaves a model's outputs unchanged."""

from __future__ import annotations

import pytest
import torch

import vispe
from vispe.backbones.point import PointTransformer
from vispe.encodings.string import STRING, StringRoPE, circulant_bases, fold_string
from vispe.positions import Positions, grid_positions

VARIANTS = ['string_cayley', 'string_circulant']


def build(name: str, heads: int = 3, head_dim: int = 16, **options) -> STRING:
    enc = vispe.build_encoding({'type': name, **options}, dim=heads * head_dim, num_heads=heads)
    assert isinstance(enc, STRING)
    return enc


def trained_like(enc: torch.nn.Module, std: float = 0.3) -> None:
    """Every parameter random: a STRING away from its init (P far from I, other frequencies)."""
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=std)


def logits(enc: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> torch.Tensor:
    rq, rk = enc.rotate(q, k, pos)
    return rq @ rk.transpose(-1, -2)


def test_cayley_equals_rope_axial_and_rope_mixed_at_init_bit_for_bit() -> None:
    pos = grid_positions(5, 7, num_prefix=1)
    q, k = torch.randn(2, 3, 36, 16), torch.randn(2, 3, 36, 16)
    axial = vispe.build_encoding('rope_axial', dim=48, num_heads=3)
    for got, want in zip(build('string_cayley', frequencies='axial').rotate(q, k, pos), axial.rotate(q, k, pos)):
        assert torch.equal(got, want)
    mixed = vispe.build_encoding('rope_mixed', dim=48, num_heads=3)
    enc = build('string_cayley')
    with torch.no_grad():
        enc.freqs.copy_(mixed.freqs.flip(0))  # rope_mixed keeps (col, row), STRING coordinate order (row, col)
    for got, want in zip(enc.rotate(q, k, pos), mixed.rotate(q, k, pos)):
        assert torch.equal(got, want)


@pytest.mark.parametrize('mode', ['axial', 'mixed'])
def test_cayley_equals_rope3d_at_init(mode: str) -> None:
    torch.manual_seed(0)
    rope = vispe.build_encoding({'type': 'rope3d', 'mode': mode}, dim=96, num_heads=2, ndim=3)
    torch.manual_seed(0)  # the same random init in mixed mode
    enc = vispe.build_encoding({'type': 'string_cayley', 'frequencies': mode}, dim=96, num_heads=2, ndim=3)
    pos = Positions(torch.randn(2, 20, 3), num_prefix=1)
    q, k = torch.randn(2, 2, 21, 48), torch.randn(2, 2, 21, 48)
    for got, want in zip(enc.rotate(q, k, pos), rope.rotate(q, k, pos)):
        assert torch.equal(got, want)


def test_cayley_p_is_orthogonal_and_away_from_identity_after_training() -> None:
    enc = build('string_cayley')
    trained_like(enc)
    b = enc.basis().double()
    torch.testing.assert_close(
        b @ b.transpose(-1, -2), torch.eye(16, dtype=torch.float64).expand(3, -1, -1), atol=1e-5, rtol=0
    )
    assert (b - torch.eye(16)).abs().amax() > 0.1
    s = enc.skew().double()  # the Cayley transform's convention: P = (I - S)(I + S)^-1, B = P^T
    eye = torch.eye(16, dtype=torch.float64)
    p = (eye - s) @ torch.linalg.inv(eye + s)
    torch.testing.assert_close(b, p.transpose(-1, -2), atol=1e-5, rtol=1e-5)


def test_circulant_equals_the_matrix_exponential_of_commuting_skew_circulants() -> None:
    enc = build('string_circulant')
    trained_like(enc, 1.0)
    gens = enc.generators().double()  # (2, H, d, d)
    torch.testing.assert_close(gens, -gens.transpose(-1, -2))
    torch.testing.assert_close(gens[0] @ gens[1], gens[1] @ gens[0])  # commuting
    x = torch.tensor([[1.5, -2.0], [0.25, 3.0]])
    q = torch.randn(1, 3, 2, 16)
    got, _ = enc.rotate(q, q, Positions(x))  # RoPE(x) F q, whose logits are those of R(x) = F^T RoPE(x) F
    full = torch.linalg.matrix_exp(
        x.double()[:, 0, None, None, None] * gens[0] + x.double()[:, 1, None, None, None] * gens[1]
    )
    want = torch.einsum('nhab,hnb->hna', full, q[0].double())
    fourier = enc.basis().double()[0]
    torch.testing.assert_close(got[0].double() @ fourier, want, atol=1e-5, rtol=1e-5)


def test_circulant_basis_is_orthonormal_and_init_frequencies_are_ropes() -> None:
    sines, fourier = circulant_bases(16)
    torch.testing.assert_close(fourier @ fourier.T, torch.eye(16), atol=1e-6, rtol=0)
    enc = build('string_circulant', frequencies='axial')
    axial = build('string_cayley', frequencies='axial')
    want = axial.frequencies().clone()
    want[..., 0] = 0  # pair 0: the constant and alternating vectors, at rate 0 for every circulant
    torch.testing.assert_close(enc.frequencies(), want)


@pytest.mark.parametrize('name', VARIANTS)
def test_2d_logits_depend_only_on_offsets(name: str) -> None:
    enc = build(name)
    trained_like(enc)
    pos = grid_positions(4, 6, num_prefix=1)
    shifted = Positions(pos.coords + torch.tensor([3.0, -5.0]), grid=pos.grid, num_prefix=1)
    q, k = torch.randn(2, 3, 25, 16), torch.randn(2, 3, 25, 16)
    base = logits(enc, q, k, pos)
    torch.testing.assert_close(logits(enc, q, k, shifted)[..., 1:, 1:], base[..., 1:, 1:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(base[..., 0, 0], (q[..., 0, :] * k[..., 0, :]).sum(-1))  # prefix-prefix as without
    assert not torch.allclose(logits(enc, q, k, Positions(pos.coords * 2, num_prefix=1)), base, atol=1e-2)


@pytest.mark.parametrize('name', VARIANTS)
def test_3d_logits_ignore_translations_cls_included(name: str) -> None:
    enc = vispe.build_encoding(name, dim=96, num_heads=2, ndim=3)
    trained_like(enc)
    q, k = torch.randn(2, 2, 31, 48), torch.randn(2, 2, 31, 48)
    cloud = torch.rand(2, 30, 3)
    base = logits(enc, q, k, Positions(cloud, num_prefix=1))
    moved = logits(enc, q, k, Positions(cloud + torch.tensor([3.0, -1.5, 2.0]), num_prefix=1))
    torch.testing.assert_close(moved, base, atol=1e-4, rtol=1e-4)  # the centroid prefix: every logit


@pytest.mark.parametrize('name', VARIANTS)
def test_point_transformer_ignores_translations(name: str) -> None:
    model = PointTransformer(
        num_classes=5, num_groups=16, group_size=8, embed_dim=48, depth=2, num_heads=2, encoding=name
    ).eval()
    for m in model.modules():
        if isinstance(m, STRING):
            trained_like(m)
    cloud = torch.rand(3, 128, 3)
    out = model(cloud)
    torch.testing.assert_close(model(cloud + torch.tensor([3.0, -1.5, 2.0])), out, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('name', VARIANTS)
def test_fold_leaves_vit_outputs_unchanged(name: str, tiny_vit_kwargs) -> None:
    model = vispe.create_model('vit_small_patch16_224', encoding=name, qkv_bias=True, **tiny_vit_kwargs).eval()
    for m in model.modules():
        if isinstance(m, STRING):
            trained_like(m)
    x = torch.randn(2, 3, 32, 32)
    want = model(x)
    fold_string(model)
    kinds = {type(m) for m in model.modules() if isinstance(m, vispe.Encoding)}
    assert kinds == {StringRoPE}, kinds
    assert not any(n.endswith('.A') for n, _ in model.named_parameters())
    torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)


def test_fold_leaves_point_outputs_unchanged() -> None:
    model = PointTransformer(
        num_classes=5, num_groups=16, group_size=8, embed_dim=48, depth=2, num_heads=2, encoding='string_cayley'
    ).eval()
    for m in model.modules():
        if isinstance(m, STRING):
            trained_like(m)
    cloud = torch.rand(2, 128, 3)
    want = model(cloud)
    torch.testing.assert_close(fold_string(model)(cloud), want, atol=1e-5, rtol=1e-5)


def test_weight_decay_declarations() -> None:
    assert build('string_cayley').no_weight_decay() == {'A', 'freqs'}
    assert build('string_circulant').no_weight_decay() == {'coeffs'}
    assert build('string_cayley', frequencies='axial').no_weight_decay() == {'A'}  # freqs is then a buffer


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match='frequencies must be one of'):
        build('string_cayley', frequencies='learned')
    with pytest.raises(ValueError, match='prefix must be one of'):
        build('string_circulant', prefix='cls')
    with pytest.raises(ValueError, match='an even head dim'):
        vispe.build_encoding('string_circulant', dim=15, num_heads=3)


def test_cayley_generator_gets_a_gradient_at_init() -> None:
    """At A = 0 the encoding is RoPE, but the Cayley transform's differential there is -2 dS, so training moves P."""
    enc = build('string_cayley')
    pos = grid_positions(3, 4)
    q, k = torch.randn(1, 3, 12, 16), torch.randn(1, 3, 12, 16)
    logits(enc, q, k, pos).square().sum().backward()
    assert enc.A.grad is not None and enc.A.grad.abs().amax() > 0


def test_fold_refuses_a_qk_norm(tiny_vit_kwargs) -> None:
    model = vispe.create_model('vit_small_patch16_224', encoding='string_cayley', qk_norm=True, **tiny_vit_kwargs)
    with pytest.raises(ValueError, match='q/k norm'):
        fold_string(model)
