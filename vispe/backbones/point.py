"""Point-cloud building blocks on (B, N, 3) tensors: farthest-point sampling, kNN grouping, Point-MAE's tokeniser."""

from __future__ import annotations

from typing import cast

import torch
from timm.layers import trunc_normal_
from torch import Tensor, nn

from vispe.backbones.base import PEBackbone, pe_blocks
from vispe.backbones.common import check_input_dtype, check_num_classes, check_rates
from vispe.encodings.build import EncodingSpec
from vispe.positions import Positions
from vispe.registry import MODELS


def farthest_point_sample(xyz: Tensor, num: int, start: Tensor | None = None) -> Tensor:
    """Indices (B, num) of ``num`` points of ``xyz`` (B, N, 3) picked by farthest-point sampling: the first is
    ``start`` (B,) (default point 0, as open3d), each next one the point farthest from those picked (the first on ties),
    by squared distance in float32 or wider."""
    if xyz.dim() != 3:
        raise ValueError(f'xyz must be (B, N, D) points, got shape {tuple(xyz.shape)}')
    B, N, _ = xyz.shape
    if not 1 <= num <= N:
        raise ValueError(f'cannot pick {num} of {N} points: num must be in [1, N]')
    points = xyz if xyz.dtype in (torch.float32, torch.float64) else xyz.float()
    batch = torch.arange(B, device=xyz.device)
    picked = torch.empty(B, num, dtype=torch.long, device=xyz.device)
    current = torch.zeros(B, dtype=torch.long, device=xyz.device) if start is None else start.long()
    nearest = torch.full((B, N), float('inf'), dtype=points.dtype, device=xyz.device)  # to the picked set
    for i in range(num):
        picked[:, i] = current
        centre = points[batch, current]  # (B, D)
        nearest = torch.minimum(nearest, (points - centre[:, None]).square().sum(-1))
        current = nearest.argmax(dim=-1)
    return picked


def knn(query: Tensor, points: Tensor, k: int) -> Tensor:
    """Indices (B, M, k) of the ``k`` nearest ``points`` (B, N, D) of each ``query`` (B, M, D), nearest first."""
    if query.dim() != 3 or points.dim() != 3 or query.shape[0] != points.shape[0]:
        raise ValueError(
            f'query (B, M, D) and points (B, N, D) expected, got {tuple(query.shape)} and {tuple(points.shape)}'
        )
    if not 1 <= k <= points.shape[1]:
        raise ValueError(f'k = {k} neighbours asked of {points.shape[1]} points: k must be in [1, N]')
    dist = torch.cdist(query.float(), points.float(), compute_mode='donot_use_mm_for_euclid_dist')  # (B, M, N)
    return dist.topk(k, dim=-1, largest=False, sorted=True).indices


def gather_points(points: Tensor, index: Tensor) -> Tensor:
    """points (B, N, C) gathered at index (B, ...) -> (B, ..., C)."""
    B = points.shape[0]
    flat = index.reshape(B, -1)  # (B, K)
    out = torch.gather(points, 1, flat[..., None].expand(-1, -1, points.shape[-1]))
    return out.reshape(*index.shape, points.shape[-1])


def group_points(xyz: Tensor, num_groups: int, group_size: int) -> tuple[Tensor, Tensor]:
    """Point-MAE's grouping: FPS centres (B, G, 3) and their ``group_size`` nearest points, centred (B, G, K, 3)."""
    centres = gather_points(xyz, farthest_point_sample(xyz, num_groups))
    neighbourhoods = gather_points(xyz, knn(centres, xyz, group_size)) - centres[:, :, None]
    return centres, neighbourhoods


class MiniPointNet(nn.Module):
    """Point-MAE's group encoder: (B, G, K, 3) -> (B, G, embed_dim), invariant to point order within a group; LayerNorm
    where Point-MAE has BatchNorm, so a token does not depend on the other clouds of the batch."""

    def __init__(self, embed_dim: int, hidden: int = 128, in_dim: int = 3) -> None:
        super().__init__()
        self.first = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Linear(hidden, 2 * hidden)
        )
        self.second = nn.Sequential(
            nn.Linear(4 * hidden, 4 * hidden), nn.LayerNorm(4 * hidden), nn.GELU(), nn.Linear(4 * hidden, embed_dim)
        )

    def forward(self, groups: Tensor) -> Tensor:
        f = self.first(groups)  # (B, G, K, 2h)
        pooled = f.amax(dim=-2, keepdim=True).expand_as(f)
        return self.second(torch.cat([pooled, f], dim=-1)).amax(dim=-2)  # (B, G, embed_dim)


@MODELS.register_module()
class PointTransformer(PEBackbone):
    """A Point-MAE-style classifier: FPS centres with centred kNN groups, a mini-PointNet token per group, a cls token,
    pre-norm blocks on vispe's attention, and a head on [cls, max-pool of the group tokens].

    Args:
        num_classes: outputs of the head.
        encoding: vispe encoding spec; positions are the group centres (3D, the data's unit), the cls token has none.
        num_groups: G, the group centres.
        group_size: K, the points per group.
        embed_dim: model width.
        depth: blocks.
        num_heads: attention heads, dividing embed_dim.
        mlp_ratio: MLP width over embed_dim.
        drop_path_rate: stochastic depth of the last block, rising linearly from 0.
        group_hidden: the mini-PointNet's width h (its second MLP is 4h wide).

    ``forward(points)``: (B, N, 3), N >= group_size -> (B, num_classes); N < num_groups gives one group per point.
    """

    #: the group tokeniser and the cls token (layer 0 of layer-wise lr decay, with the model-level encodings)
    stem_prefixes = ('group_embed', 'cls_token')

    def __init__(
        self,
        num_classes: int = 40,
        encoding: EncodingSpec = None,
        num_groups: int = 64,
        group_size: int = 32,
        embed_dim: int = 384,
        depth: int = 12,
        num_heads: int = 6,
        mlp_ratio: float = 4.0,
        drop_path_rate: float = 0.1,
        group_hidden: int = 128,
    ) -> None:
        super().__init__()
        for name, value in dict(num_groups=num_groups, group_size=group_size, group_hidden=group_hidden).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'PointTransformer: {name} must be an int >= 1, got {name}={value!r}')
        check_rates('PointTransformer', drop_path_rate=drop_path_rate)
        check_num_classes('PointTransformer', num_classes)
        self.num_classes, self.num_groups, self.group_size = num_classes, num_groups, group_size
        self.group_embed = MiniPointNet(embed_dim, hidden=group_hidden)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        per_layer = self.build_encodings(encoding, embed_dim, num_heads, depth, grid_size=(), ndim=3, grid=False)
        self.blocks = pe_blocks(embed_dim, num_heads, mlp_ratio, drop_path_rate, per_layer)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(2 * embed_dim, num_classes)
        trunc_normal_(self.cls_token, std=0.02)

    def check_input(self, points: Tensor) -> None:
        """ValueError unless ``points`` are (B, N, 3) of the model's dtype with at least ``group_size`` points."""
        if points.dim() != 3 or points.shape[-1] != 3:
            raise ValueError(f'points must be (B, N, 3), got shape {tuple(points.shape)}')
        check_input_dtype('PointTransformer', points, cast(nn.Linear, self.group_embed.first[0]).weight)
        if points.shape[1] < self.group_size:
            raise ValueError(
                f'{points.shape[1]} points per cloud, fewer than group_size={self.group_size}: sample more points '
                'or lower group_size'
            )

    def tokens(self, points: Tensor) -> tuple[Tensor, Positions]:
        """(B, N, 3) -> tokens (B, 1 + G, D), cls first, and their positions, the group centres."""
        self.check_input(points)
        centres, groups = group_points(points, min(self.num_groups, points.shape[1]), self.group_size)
        pos = Positions(coords=centres, num_prefix=1)
        x = self.encoding_stack.embed(self.group_embed(groups), pos)  # (B, G, D)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1), pos

    def forward_features(self, points: Tensor) -> Tensor:
        """(B, N, 3) -> normalised tokens (B, 1 + G, D), the cls token first."""
        return self.norm(self.encode(points))

    def forward(self, points: Tensor) -> Tensor:
        x = self.forward_features(points)
        return self.head(torch.cat([x[:, 0], x[:, 1:].amax(dim=1)], dim=-1))


__all__ = ['MiniPointNet', 'PointTransformer', 'farthest_point_sample', 'gather_points', 'group_points', 'knn']
