"""PRoPE, projective positional encoding (Li et al., NeurIPS 2025): GTA's scheme (``ViewTransformAttention``) with
P = K' E in the 4 x 4 blocks on half of each head (E world-to-camera, K' = [[f_x / W, s / W, c_x / W - 1/2],
[0, f_y / H, c_y / H - 1/2], [0, 0, 1]] for a W x H image), RoPE of the patch (theta 100) on the other half.
Departure: K' keeps the skew s, which the reference drops (``skew=False``)."""

from __future__ import annotations

import torch

from vispe import geometry as G
from vispe.encodings.camera import camera_poses
from vispe.encodings.gta import ViewTransformAttention
from vispe.positions import Cameras
from vispe.registry import ENCODINGS

#: the entries of K that the reference reads (f_x, f_y, c_x, c_y and the last row): ``skew=False`` keeps only these
_NO_SKEW = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])


def normalized_intrinsics(K: torch.Tensor, image_size: tuple[int, int]) -> torch.Tensor:
    """K' (..., 3, 3) of pixel intrinsics ``K`` and the (h, w) image size."""
    h, w = image_size
    scale = torch.tensor([[1.0 / w, 0.0, -0.5], [0.0, 1.0 / h, -0.5], [0.0, 0.0, 1.0]], device=K.device)
    return scale @ K.float()


def lift(m: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(m, (0, 1, 0, 1)) + torch.nn.functional.pad(m.new_ones(1, 1), (3, 0, 3, 0))


@ENCODINGS.register_module(name='prope')
class PRoPE(ViewTransformAttention):
    """PRoPE (module docstring).

    Args:
        dim: model width.
        num_heads: attention heads; the head dim must divide by 8.
        intrinsics: include K'; False: P = E.
        theta: the RoPE half's frequency base.
        skew: keep K[0, 1] in K'.
    """

    label = 'prope'

    def __init__(
        self, dim: int, num_heads: int, intrinsics: bool = True, theta: float = 100.0, skew: bool = True
    ) -> None:
        if (dim // num_heads) % 8:
            raise ValueError(
                f'prope splits each head into 4-channel blocks and two axes of rotated pairs: the head dim must '
                f'divide by 8, got {dim // num_heads} (dim {dim} / {num_heads} heads); change dim or num_heads'
            )
        super().__init__(dim, num_heads, se3_fraction=0.5, theta=theta, transform_values=True, so2='rope_axial')
        self.intrinsics, self.skew = bool(intrinsics), bool(skew)

    def view_blocks(self, cameras: Cameras) -> tuple[torch.Tensor, torch.Tensor]:
        """rho = P^-1 and P, (B, V, 4, 4) float32."""
        T = camera_poses(cameras, relative=False)
        E = G.rigid_inverse(T)  # world-to-camera
        if not self.intrinsics:
            return T, E
        K = cameras.K if self.skew else cameras.K * _NO_SKEW.to(cameras.K.device)
        k = normalized_intrinsics(K, cameras.image_size)
        return T @ lift(torch.linalg.inv(k)), lift(k) @ E

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, intrinsics={self.intrinsics}, skew={self.skew}'


__all__ = ['PRoPE', 'lift', 'normalized_intrinsics']
