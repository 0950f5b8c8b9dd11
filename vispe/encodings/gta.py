"""GTA, geometric transform attention (Miyato et al., ICLR 2024): each token's g = (camera-to-world pose T, patch
position) acts on each head's channels as rho(g), 4 x 4 blocks [[R, s t], [0, 1]] (s learned) then 2 x 2 rotations
of the patch: q' = rho(g_q)^-T q, k' = rho(g_k) k, v' = rho(g_k) v, out = rho(g_q)^-1 (softmax(q'^T k') v').
Departure: the SO(2) angles default to rope_axial's theta^(-j/n) on integer coordinates; the authors' 2 pi 2^(j - n)
on (p + 0.5) / P is ``so2='reference'``."""

from __future__ import annotations

import math

import torch
from torch import nn

from vispe import geometry as G
from vispe.encodings.base import Encoding, check_positive
from vispe.encodings.camera import camera_poses, require_cameras
from vispe.kernels.rotary import rotary_table, rotate_pairs
from vispe.positions import Cameras, Positions
from vispe.registry import ENCODINGS


class ViewTransformAttention(Encoding):
    """GTA's scheme (module docstring) for any per-view 4 x 4 rho (``view_blocks``) on the first ``se3_dims``
    channels, SO(2) rotations of the patch on the next ``so2_dims``; prefix tokens get the identity. Arguments as
    ``GTA``'s."""

    ndims = (2,)
    needs_cameras = True
    #: (so2_dims / 4,) SO(2) frequencies, a buffer
    freqs: torch.Tensor
    so2_variants = ('rope_axial', 'reference')
    #: the registered name, for messages
    label = 'gta'

    def __init__(
        self,
        dim: int,
        num_heads: int,
        se3_fraction: float = 0.5,
        theta: float = 100.0,
        transform_values: bool = True,
        so2: str = 'rope_axial',
    ) -> None:
        super().__init__()
        head_dim = dim // num_heads
        if not 0.0 <= se3_fraction <= 1.0:
            raise ValueError(f'{self.label} se3_fraction is a share of each head, in [0, 1]; got {se3_fraction}')
        check_positive(self.label, theta=theta)
        if so2 not in self.so2_variants:
            raise ValueError(f'{self.label} so2 is one of {self.so2_variants}, got {so2!r}')
        self.so2 = so2
        self.head_dim = head_dim
        self.se3_dims = 4 * (int(head_dim * se3_fraction) // 4)
        so2_pairs = (head_dim - self.se3_dims) // 2
        per_axis = so2_pairs // 2
        self.so2_dims = 4 * per_axis
        if so2 == 'reference':
            freqs = 2 * math.pi * 2.0 ** (torch.arange(1, per_axis + 1, dtype=torch.float32) - per_axis)
        else:
            freqs = 1.0 / theta ** (torch.arange(per_axis, dtype=torch.float32) / max(per_axis, 1))
        self.register_buffer('freqs', freqs, persistent=False)
        self.transform_values = bool(transform_values)

    # --- the representation -----------------------------------------------------------------------------------------
    def view_blocks(self, cameras: Cameras) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, V, 4, 4) float32 rho of each view and its inverse."""
        raise NotImplementedError

    def pose_blocks(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N_total, 4, 4) float32 rho of each token's view and its inverse; identity for prefix tokens."""
        cameras = require_cameras(pos, self.label)
        rho, inv = (cameras.per_token(m) for m in self.view_blocks(cameras))  # (B, N, 4, 4) each
        if pos.num_prefix:
            pad = torch.eye(4, device=rho.device).expand(rho.shape[0], pos.num_prefix, 4, 4)
            rho, inv = torch.cat([pad, rho], dim=1), torch.cat([pad, inv], dim=1)
        return rho, inv

    def so2_coords(self, pos: Positions) -> torch.Tensor:
        """(N, 2) or (B, N, 2) float32 (row, col) of the SO(2) angles."""
        coords = pos.coords.float()
        if self.so2 == 'reference':
            span = pos.span if pos.span is not None else require_cameras(pos, self.label).grid
            coords = (coords + 0.5) / torch.tensor([float(s) for s in span], device=coords.device)
        return coords

    def so2_table(self, pos: Positions) -> torch.Tensor:
        """(N_total, so2_dims / 2, 2) (cos, sin): col pairs, then row pairs."""
        coords = self.so2_coords(pos)
        angles = torch.cat([coords[..., 1, None] * self.freqs, coords[..., 0, None] * self.freqs], dim=-1)
        return rotary_table(angles, pos.num_prefix)

    # --- applying it ----------------------------------------------------------------------------------------------
    def _transform(
        self, x: torch.Tensor, blocks: torch.Tensor, transpose: bool, table: torch.Tensor, inverse: bool = False
    ) -> torch.Tensor:
        B, H, N, _ = x.shape
        xf = x.float()
        se3, so2, rest = xf.split([self.se3_dims, self.so2_dims, self.head_dim - self.se3_dims - self.so2_dims], -1)
        parts = []
        if self.se3_dims:
            equation = 'bnji,bhnkj->bhnki' if transpose else 'bnij,bhnkj->bhnki'
            parts.append(torch.einsum(equation, blocks, se3.reshape(B, H, N, -1, 4)).reshape(B, H, N, -1))
        if self.so2_dims:
            parts.append(rotate_pairs(so2, table, inverse=inverse))
        parts.append(rest)
        return torch.cat(parts, dim=-1).type_as(x)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        rho, inv = self.pose_blocks(pos)
        table = self.so2_table(pos)
        return self._transform(q, inv, True, table), self._transform(k, rho, False, table)

    def transform_v(self, v: torch.Tensor, pos: Positions) -> torch.Tensor:
        if not self.transform_values:
            return v
        rho, _ = self.pose_blocks(pos)
        return self._transform(v, rho, False, self.so2_table(pos))

    def transform_out(self, out: torch.Tensor, pos: Positions) -> torch.Tensor:
        if not self.transform_values:
            return out
        _, inv = self.pose_blocks(pos)
        return self._transform(out, inv, False, self.so2_table(pos), inverse=True)

    def extra_repr(self) -> str:
        return (
            f'se3_dims={self.se3_dims}, so2_dims={self.so2_dims}, transform_values={self.transform_values}, '
            f'so2={self.so2!r}'
        )


@ENCODINGS.register_module(name='gta')
class GTA(ViewTransformAttention):
    """Geometric transform attention; float32 throughout.

    Args:
        dim: model width.
        num_heads: attention heads.
        se3_fraction: share of each head's channels in 4 x 4 blocks (rounded down to a multiple of 4).
        theta: SO(2) frequency base (``so2='rope_axial'``).
        translation_scale: init of s.
        transform_values: also transform v and the output.
        relative: poses relative to the first view.
        so2: ``'rope_axial'`` or ``'reference'``.
    """

    no_weight_decay_params = ('translation_scale',)
    weight_decay_note = 'decay would make it ignore the translations'

    def __init__(
        self,
        dim: int,
        num_heads: int,
        se3_fraction: float = 0.5,
        theta: float = 100.0,
        translation_scale: float = 0.01,
        transform_values: bool = True,
        relative: bool = False,
        so2: str = 'rope_axial',
    ) -> None:
        super().__init__(dim, num_heads, se3_fraction, theta, transform_values, so2)
        self.translation_scale = nn.Parameter(torch.tensor(float(translation_scale)))
        self.relative = bool(relative)

    def view_blocks(self, cameras: Cameras) -> tuple[torch.Tensor, torch.Tensor]:
        """[[R, s t], [0, 1]] of each camera-to-world pose and its inverse."""
        poses = camera_poses(cameras, self.relative)  # (B, V, 4, 4)
        R, t = poses[..., :3, :3], poses[..., :3, 3:] * self.translation_scale.float()
        bottom = torch.eye(4, device=poses.device).expand_as(poses)[..., 3:, :]
        rho = torch.cat([torch.cat([R, t], dim=-1), bottom], dim=-2)
        return rho, G.rigid_inverse(rho)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, relative={self.relative}'


__all__ = ['GTA', 'ViewTransformAttention']
