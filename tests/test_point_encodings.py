"""3D encodings on point clouds: rope3d (relative), lff on xyz, built from the registry like the 2D ones."""

from __future__ import annotations

import pytest
import torch

from vispe import build_encoding, list_encodings
from vispe.backbones.point import PointTransformer
from vispe.encodings.points import RoPE3D
from vispe.encodings.rotary_core import random_rotation
from vispe.positions import Positions

SHIFT = torch.tensor([3.0, -1.5, 2.0])


def tiny_point_transformer(**kwargs) -> PointTransformer:
    args = dict(num_classes=5, num_groups=16, group_size=8, embed_dim=48, depth=2, num_heads=2, drop_path_rate=0.0)
    return PointTransformer(**{**args, **kwargs}).eval()


def scores(enc: RoPE3D, q: torch.Tensor, k: torch.Tensor, coords: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
    rq, rk = enc.rotate(q, k, Positions(coords=coords, num_prefix=num_prefix))
    return rq @ rk.transpose(-1, -2)


@pytest.mark.parametrize('mode', ['axial', 'mixed'])
def test_rope3d_scores_depend_only_on_offsets(mode: str) -> None:
    torch.manual_seed(0)
    enc = build_encoding(dict(type='rope3d', mode=mode), dim=96, num_heads=2, ndim=3)
    q, k = torch.randn(2, 2, 11, 48), torch.randn(2, 2, 11, 48)
    coords = torch.rand(2, 10, 3)
    base = scores(enc, q, k, coords, num_prefix=1)
    assert torch.allclose(scores(enc, q, k, coords + SHIFT, num_prefix=1), base, atol=1e-4)
    assert not torch.allclose(scores(enc, q, k, coords * 1.5, num_prefix=1), base, atol=1e-2)  # but distances count


def test_rope3d_prefix_none_leaves_cls_absolute() -> None:
    """An unrotated cls token meets each group through its absolute position: the centroid default is needed."""
    torch.manual_seed(1)
    enc = RoPE3D(96, 2, prefix='none')
    q, k = torch.randn(1, 2, 11, 48), torch.randn(1, 2, 11, 48)
    coords = torch.rand(1, 10, 3)
    moved = scores(enc, q, k, coords + SHIFT, num_prefix=1)
    base = scores(enc, q, k, coords, num_prefix=1)
    assert torch.allclose(moved[..., 1:, 1:], base[..., 1:, 1:], atol=1e-4)  # group-group logits stay relative
    assert not torch.allclose(moved[..., 0, 1:], base[..., 0, 1:], atol=1e-2)  # cls-group logits do not


@pytest.mark.parametrize('mode', ['axial', 'mixed'])
def test_rope3d_point_transformer_logits_ignore_translation(mode: str) -> None:
    torch.manual_seed(2)
    model = tiny_point_transformer(encoding=dict(type='rope3d', mode=mode))
    cloud = torch.rand(3, 128, 3)
    logits = model(cloud)
    assert torch.allclose(model(cloud + SHIFT), logits, atol=1e-4)
    assert not torch.allclose(model(cloud * 2.0), logits, atol=1e-3)


def test_rope3d_frequencies_partial_rotation_and_mixed_init() -> None:
    torch.manual_seed(3)
    axial = RoPE3D(dim=384, num_heads=6)  # head dim 64: 10 pairs per axis, 2 of 32 pairs unrotated
    assert axial.rotated_pairs == 30 and axial.freqs.shape == (3, 1, 32)
    assert torch.all(axial.freqs[:, :, 30:] == 0)
    assert torch.allclose(axial.freqs[0, 0, 0], torch.tensor(8.0))  # fastest pair: freq_scale rad per unit
    assert torch.allclose(axial.freqs[2, 0, 29], torch.tensor(8.0 / 100**0.9))
    assert (axial.freqs[:, 0, :30] != 0).sum(0).eq(1).all()  # axial: each pair turns with one axis
    q = torch.randn(1, 6, 4, 64)
    rq, _ = axial.rotate(q, q, Positions(coords=torch.rand(1, 4, 3)))
    assert torch.equal(rq[..., 60:], q[..., 60:]) and not torch.allclose(rq[..., :60], q[..., :60])

    mixed = RoPE3D(dim=384, num_heads=6, mode='mixed')
    assert isinstance(mixed.freqs, torch.nn.Parameter) and mixed.freqs.shape == (3, 6, 32)
    assert mixed.no_weight_decay() == {'freqs'} and axial.no_weight_decay() == set()
    # per head, the three pair groups point along orthonormal directions, magnitudes as axial (mixed: theta 10)
    for h in range(6):
        dirs = torch.stack([mixed.freqs[:, h, 10 * a] / 8.0 for a in range(3)])
        assert torch.allclose(dirs @ dirs.T, torch.eye(3), atol=1e-5)
    axial10 = RoPE3D(dim=384, num_heads=6, theta=10.0).freqs.norm(dim=0)
    assert torch.allclose(mixed.freqs.norm(dim=0), axial10.expand(6, -1), atol=1e-5)
    rot = random_rotation(3)
    assert torch.allclose(rot @ rot.T, torch.eye(3), atol=1e-5) and torch.det(rot) > 0


def test_rope3d_bad_arguments_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match='mode must be one of'):
        RoPE3D(96, 2, mode='spiral')
    with pytest.raises(ValueError, match='head dim of at least 6'):
        RoPE3D(8, 2)
    with pytest.raises(ValueError, match='freq_scale > 0'):
        RoPE3D(96, 2, freq_scale=0)
    with pytest.raises(ValueError, match='built for 3D positions but got 2D'):
        RoPE3D(96, 2).rotate(torch.randn(1, 2, 4, 48), torch.randn(1, 2, 4, 48), Positions(torch.rand(4, 2)))


def test_point_encodings_are_listed_for_3d_only() -> None:
    points = list_encodings(ndim=3, grid=False)
    assert {'point_mlp', 'rope3d', 'lff'} <= set(points)
    assert 'rope3d' not in list_encodings(ndim=2) and 'rope_axial' not in points


def test_lff_on_xyz_is_translation_and_scale_invariant_by_its_normalisation() -> None:
    """lff min-max normalises each cloud's centres per axis: moving or resizing a cloud leaves it unchanged."""
    torch.manual_seed(4)
    model = tiny_point_transformer(encoding='lff')
    assert model.pe['lff'].ndim == 3
    cloud = torch.rand(2, 128, 3)
    logits = model(cloud)
    assert torch.allclose(model(cloud + SHIFT), logits, atol=1e-4)
    lff = model.pe['lff']
    pos = Positions(coords=torch.rand(2, 16, 3))
    tokens = torch.zeros(2, 16, 48)
    assert torch.allclose(lff.embed(tokens, Positions(pos.coords * 2.0)), lff.embed(tokens, pos), atol=1e-5)
    assert not torch.allclose(lff.embed(tokens, Positions(pos.coords.flip(1))), lff.embed(tokens, pos), atol=1e-4)


def test_backbones_refuse_encodings_of_the_wrong_dimension() -> None:
    with pytest.raises(ValueError, match=r"'peg' does not work on 3D positions; for point clouds choose one of"):
        tiny_point_transformer(encoding='peg')
    with pytest.raises(ValueError, match=r"'rope_axial' needs its positions on a token grid .* which point clouds do "):
        tiny_point_transformer(encoding='rope_axial')
    from vispe import create_model

    with pytest.raises(ValueError, match=r"'rope3d' does not work on 2D positions; for image token grids"):
        create_model('vit_tiny_patch16_224', encoding='rope3d', img_size=32, patch_size=8)


@pytest.mark.parametrize('name', list_encodings(ndim=3, grid=False))
def test_point_encodings_train_in_fp32_and_bf16_and_round_trip(name: str) -> None:
    """Every 3D encoding (picked up automatically): gradients reach its parameters, bf16 autocast stays close,
    and a state dict restores the same function."""
    torch.manual_seed(6)
    model = tiny_point_transformer(encoding=name)
    cloud = torch.rand(2, 96, 3)
    out = model(cloud)
    out.square().sum().backward()
    pe_params = [(n, p) for n, p in model.named_parameters() if '.pe.' in f'.{n}']
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in pe_params), [n for n, _ in pe_params]
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out16 = model(cloud)
    assert torch.isfinite(out16.float()).all() and (out16.float() - out).abs().max() < 0.25
    torch.manual_seed(7)
    fresh = tiny_point_transformer(encoding=name)
    assert not torch.allclose(fresh(cloud), out)
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(cloud), out)
