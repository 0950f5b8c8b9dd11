"""GTA, geometric transform attention (Miyato et al., "GTA: A Geometry-Aware Attention Mechanism for Multi-View
Transformers", ICLR 2024).

Each token carries a group element g = (its camera's pose, its patch position in the image), represented by a
block-diagonal matrix rho(g) acting on each head's channels: 4 x 4 blocks [[R, s t], [0, 1]] of the camera pose
(translation scaled by a learned scalar s, init 0.01) on the first ``se3_dims`` channels, and 2 x 2 rotations of
the patch (row, col) at several frequencies on the rest (``so2``, below). Then

    q' = rho(g_q)^-T q,   k' = rho(g_k) k,   v' = rho(g_k) v,   out = rho(g_q)^-1 (softmax(q'^T k') v'),

so every logit is q^T rho(g_q)^-1 rho(g_k) k and depends only on the relative element g_q^-1 g_k.

Convention (OpenCV, ``vispe.geometry``): rho takes the camera-to-world pose T. A change of world frame X -> G X
makes T -> G T, and T_q^-1 T_k is unchanged: attention is invariant to the world frame (tested). ENCODINGS.md words
the block as the world-to-camera matrix E = T^-1; with E the invariant pairing is rho(E_q) rho(E_k)^-1 (the
paper's form), which is the same relative element. With ``se3_fraction=0`` and ``transform_values=False`` GTA is
rope_axial exactly (tested).

SO(2) frequencies (``so2``), n pairs per axis:

- ``'rope_axial'`` (default): rope_axial's ladder theta^(-j / n), j = 0..n-1 (theta 100), on integer token
  coordinates, angle = omega_j * p. Counts patches: a larger grid puts tokens at offsets never seen in training.
- ``'reference'``: the authors' code (autonomousvision/gta, ``make_SO2mats`` in source/utils/gta.py, with the
  patch-centre coordinates its datasets build): omega_j = 2 pi 2^(j - n), j = 1..n, on normalised coordinates
  (p + 0.5) / P per axis (P = the view's patches on that axis), angle = omega_j (p + 0.5) / P. The highest
  frequency turns once across the image; the same point of the image gets the same angles at any grid, so a
  larger grid interpolates. (The reference interleaves the axes per frequency; vispe keeps rope_axial's order,
  col pairs then row pairs, a fixed permutation of channels that the learned projections absorb.)

Cost: the pose blocks and the SO(2) table once per forward pass and layer ((B, N, 4, 4) and (N, d/2, 2): per token,
not per head); the SE(3) channels by a float32 einsum per tensor (q, k, and v and the output with
``transform_values``), the SO(2) channels by the fused rotary kernel (``vispe.kernels.rotary``; its inverse for the
output). Float32 throughout: about four extra passes over q, k, v and the output on CPU and GPU alike (camera models
are small; not yet measured on a GPU).
"""

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
    """GTA's scheme for any per-view 4 x 4 representation rho of a token's camera (``view_blocks``: GTA's camera
    pose, PRoPE's inverse projection): on the first ``se3_dims`` channels of each head q' = rho_q^-T q,
    k' = rho_k k, v' = rho_k v, out = rho_q^-1 o, so every logit and value pairing depends on rho_q^-1 rho_k only;
    on the next ``so2_dims`` channels 2 x 2 rotations of the patch position (module doc: ``so2``). Prefix tokens get
    the identity. Float32 throughout; the result is cast back.

    Args:
        dim: model width.
        num_heads: heads (head dim d = dim / num_heads).
        se3_fraction: share, in [0, 1], of each head's channels in 4 x 4 camera blocks (rounded down to a multiple of 4;
            the rest, made even, rotate as RoPE; pairs that do not split evenly over the two axes stay unrotated).
        theta: SO(2) frequency base, > 0 (``so2='rope_axial'`` only).
        transform_values: also transform v and the output; False leaves them as they are (logits only).
        so2: SO(2) frequencies and coordinates, ``'rope_axial'`` or ``'reference'`` (GTA's code).
    """

    ndims = (2,)
    needs_cameras = True
    #: (so2_dims / 4,) SO(2) frequencies, a buffer
    freqs: torch.Tensor
    #: the ``so2`` choices
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
        """(N, 2) or (B, N, 2) float32 (row, col) the SO(2) angles are taken of: token-grid units for
        ``'rope_axial'``, (p + 0.5) / P for ``'reference'`` (P: ``pos.span``, else the cameras' view grid)."""
        coords = pos.coords.float()
        if self.so2 == 'reference':
            span = pos.span if pos.span is not None else require_cameras(pos, self.label).grid
            coords = (coords + 0.5) / torch.tensor([float(s) for s in span], device=coords.device)
        return coords

    def so2_table(self, pos: Positions) -> torch.Tensor:
        """(N_total, so2_dims / 2, 2) (cos, sin) rotations of the patch positions: col pairs first, then row pairs."""
        coords = self.so2_coords(pos)
        angles = torch.cat([coords[..., 1, None] * self.freqs, coords[..., 0, None] * self.freqs], dim=-1)
        return rotary_table(angles, pos.num_prefix)

    # --- applying it ----------------------------------------------------------------------------------------------
    def _transform(
        self, x: torch.Tensor, blocks: torch.Tensor, transpose: bool, table: torch.Tensor, inverse: bool = False
    ) -> torch.Tensor:
        """x (B, H, N, d): SE(3) channels by ``blocks`` (B, N, 4, 4) (transposed when asked), SO(2) channels by
        ``table`` (by its inverse with ``inverse``); other channels unchanged."""
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
    """Geometric transform attention: SE(3) blocks of each token's camera plus SO(2) blocks of its patch position.

    Args:
        dim: model width.
        num_heads: heads (head dim d = dim / num_heads).
        se3_fraction: share, in [0, 1], of each head's channels in 4 x 4 camera blocks (rounded down to a multiple of 4;
            the rest, made even, rotate as RoPE; pairs that do not split evenly over the two axes stay unrotated).
        theta: SO(2) frequency base, > 0 (``so2='rope_axial'`` only).
        so2: SO(2) frequencies and coordinates, ``'rope_axial'`` (integer coordinates, rope_axial's ladder) or
            ``'reference'`` (the authors' code: 2 pi 2^(j - n) on (p + 0.5) / P); see the module docstring.
        translation_scale: init of the learned translation scale s.
        transform_values: also transform v and the output (GTA); False leaves them as they are (logits only).
        relative: poses relative to the first view (the logits are the same; float rounding aside).

    Prefix tokens (no camera) get the identity. Everything is computed in float32; the result is cast back.

    Weight decay: none on ``translation_scale``: decay would pull the scale toward 0, i.e. toward ignoring the
    cameras' translations, which the learned scalar exists to calibrate against the SO(2) and rotation channels.

    Attention path: q, k and v are transformed before SDPA and the output after it, no mask: fused SDPA (flash or
    memory-efficient on CUDA).
    """

    no_weight_decay_params = ('translation_scale',)

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
        """[[R, s t], [0, 1]] of each camera-to-world pose (translation scaled by the learned s) and its inverse."""
        poses = camera_poses(cameras, self.relative)  # (B, V, 4, 4)
        R, t = poses[..., :3, :3], poses[..., :3, 3:] * self.translation_scale.float()
        bottom = torch.eye(4, device=poses.device).expand_as(poses)[..., 3:, :]
        rho = torch.cat([torch.cat([R, t], dim=-1), bottom], dim=-2)
        return rho, G.rigid_inverse(rho)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, relative={self.relative}'


__all__ = ['GTA', 'ViewTransformAttention']
