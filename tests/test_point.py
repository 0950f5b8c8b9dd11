"""Point-cloud building blocks: farthest-point sampling and kNN (vispe/backbones/point.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import needs_open3d

from vispe.backbones.point import (
    MiniPointNet,
    PointTransformer,
    farthest_point_sample,
    gather_points,
    group_points,
    knn,
)


def min_pairwise_distance(points: torch.Tensor) -> torch.Tensor:
    """(B, G, 3) -> (B,) smallest distance between two different points of each set."""
    dist = torch.cdist(points, points)
    return (dist + torch.eye(points.shape[1]) * 1e9).amin(dim=(-2, -1))


def test_fps_picks_distinct_points_that_cover_better_than_random() -> None:
    torch.manual_seed(0)
    xyz = torch.rand(4, 1024, 3)
    idx = farthest_point_sample(xyz, 64)
    assert idx.shape == (4, 64) and all(len(set(row.tolist())) == 64 for row in idx)
    fps_spacing = min_pairwise_distance(gather_points(xyz, idx))
    for _ in range(20):
        random_idx = torch.stack([torch.randperm(1024)[:64] for _ in range(4)])
        assert (fps_spacing > min_pairwise_distance(gather_points(xyz, random_idx))).all()


def test_fps_matches_open3d() -> None:
    """Same start (point 0), same greedy rule: the same points as open3d's farthest_point_down_sample."""
    o3d = needs_open3d()
    rng = np.random.default_rng(0)
    clouds = rng.random((3, 500, 3))
    idx = farthest_point_sample(torch.from_numpy(clouds), 32)
    for cloud, picked in zip(clouds, idx):
        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(cloud))
        ref = np.asarray(pcd.farthest_point_down_sample(32).points)
        np.testing.assert_allclose(np.sort(cloud[picked.numpy()], axis=0), np.sort(ref, axis=0))


def test_fps_start_and_bad_counts() -> None:
    xyz = torch.rand(2, 10, 3)
    assert farthest_point_sample(xyz, 3, start=torch.tensor([4, 7]))[:, 0].tolist() == [4, 7]
    with pytest.raises(ValueError, match='num must be in'):
        farthest_point_sample(xyz, 11)


def test_knn_equals_brute_force() -> None:
    torch.manual_seed(1)
    points, query = torch.randn(2, 300, 3), torch.randn(2, 40, 3)
    idx = knn(query, points, 8)
    assert idx.shape == (2, 40, 8)
    brute = ((query[:, :, None] - points[:, None]) ** 2).sum(-1).argsort(dim=-1)[..., :8]
    assert torch.equal(idx, brute)
    with pytest.raises(ValueError, match='k must be in'):
        knn(query, points, 301)


def test_gather_points_keeps_index_shape() -> None:
    points = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    index = torch.tensor([[[0, 4], [1, 1]], [[2, 3], [0, 0]]])
    out = gather_points(points, index)
    assert out.shape == (2, 2, 2, 3)
    assert torch.equal(out[1, 0, 1], points[1, 3]) and torch.equal(out[0, 1, 0], points[0, 1])


def test_groups_are_centred_neighbourhoods_of_fps_centres() -> None:
    torch.manual_seed(2)
    xyz = torch.rand(2, 256, 3)
    centres, groups = group_points(xyz, 16, 8)
    assert centres.shape == (2, 16, 3) and groups.shape == (2, 16, 8, 3)
    # each group's nearest point is its centre itself (offset 0), and the rest are no farther than the 8th neighbour
    assert torch.allclose(groups[:, :, 0], torch.zeros(2, 16, 3))
    kth = torch.cdist(centres, xyz).sort(dim=-1).values[..., 7]
    assert (groups.norm(dim=-1).amax(-1) <= kth + 1e-6).all()
    # translating the cloud moves the centres and leaves the centred groups as they are
    shifted_centres, shifted_groups = group_points(xyz + torch.tensor([5.0, -2.0, 1.0]), 16, 8)
    assert torch.allclose(shifted_centres, centres + torch.tensor([5.0, -2.0, 1.0]), atol=1e-5)
    assert torch.allclose(shifted_groups, groups, atol=1e-5)


def test_mini_pointnet_ignores_point_order_within_a_group() -> None:
    torch.manual_seed(3)
    net = MiniPointNet(embed_dim=32)
    groups = torch.randn(2, 5, 8, 3)
    tokens = net(groups)
    assert tokens.shape == (2, 5, 32)
    assert torch.allclose(net(groups[:, :, torch.randperm(8)]), tokens, atol=1e-6)
    assert not torch.allclose(net(groups.roll(1, dims=1)), tokens)  # but groups stay distinct tokens


def tiny_point_transformer(**kwargs) -> PointTransformer:
    args = dict(num_classes=5, num_groups=16, group_size=8, embed_dim=32, depth=2, num_heads=2, drop_path_rate=0.0)
    return PointTransformer(**{**args, **kwargs}).eval()


def test_point_transformer_without_encoding_is_translation_invariant() -> None:
    """Centred groups and no positional encoding: only shapes matter, so moving the cloud changes nothing."""
    torch.manual_seed(4)
    model = tiny_point_transformer()
    cloud = torch.rand(3, 128, 3)
    logits = model(cloud)
    assert logits.shape == (3, 5)
    assert torch.allclose(model(cloud + torch.tensor([3.0, -1.0, 0.5])), logits, atol=1e-4)
    assert not torch.allclose(model(cloud * torch.tensor([2.0, 1.0, 1.0])), logits, atol=1e-4)  # but shape does


def test_point_transformer_says_when_a_cloud_is_too_small() -> None:
    with pytest.raises(ValueError, match='fewer than group_size=8'):
        tiny_point_transformer()(torch.rand(1, 5, 3))


def test_point_mlp_is_absolute_and_added_before_every_block() -> None:
    torch.manual_seed(5)
    model = tiny_point_transformer(encoding='point_mlp', depth=3)
    enc = model.pe['point_mlp']
    assert enc.blocks == (0, 1)  # embed before block 0, after blocks 0 and 1 = before blocks 1 and 2
    cloud = torch.rand(2, 128, 3)
    logits = model(cloud)
    assert not torch.allclose(model(cloud + torch.tensor([3.0, -1.0, 0.5])), logits, atol=1e-3)
    # every hook adds the same table: with its output layer zeroed, the encoding is the identity
    torch.nn.init.zeros_(enc.mlp[2].weight)
    torch.nn.init.zeros_(enc.mlp[2].bias)
    plain = tiny_point_transformer(depth=3)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith('pe.')})
    assert torch.allclose(model(cloud), plain(cloud), atol=1e-6)


def test_point_classifier_loss_and_predictions() -> None:
    from mmengine.registry import init_default_scope

    from vispe.registry import MODELS

    init_default_scope('vispe')
    backbone = dict(type='PointTransformer', num_classes=5, num_groups=8, group_size=8, embed_dim=32, depth=1)
    model = MODELS.build(dict(type='PointClassifier', backbone=dict(backbone, num_heads=2)))
    clouds, labels = torch.rand(4, 64, 3), torch.tensor([0, 1, 2, 3])
    loss = model(clouds, labels, mode='loss')['loss']
    assert loss.ndim == 0 and loss.requires_grad
    logits = model(clouds, mode='tensor')
    assert logits.shape == (4, 5)
    preds = model(clouds, labels, mode='predict')
    assert [int(p['pred']) for p in preds] == logits.argmax(-1).tolist()
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits, labels))
