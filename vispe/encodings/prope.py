"""PRoPE, projective positional encoding (Li et al., "Cameras as Relative Positional Encoding", NeurIPS 2025,
arXiv 2507.10496; code: liruilong940607/prope).

GTA's scheme (``vispe.encodings.gta.ViewTransformAttention``) with the whole camera in the block: each view's
projection P = K' E, lifted to 4 x 4, where E is the world-to-camera pose (the inverse of vispe's camera-to-world T)
and K' the intrinsics normalised by the image size W x H,

    K' = [[f_x / W, s / W, c_x / W - 1/2], [0, f_y / H, c_y / H - 1/2], [0, 0, 1]],

so that a centred camera has its principal point at 0 and the same field of view gives the same K' at any image
size. On the first half of each head's channels, in 4-vectors,

    q' = P_q^T q,   k' = P_k^-1 k,   v' = P_k^-1 v,   out = P_q (softmax(q'^T k') v'),

so every logit is q^T P_q P_k^-1 k and every value reaches the output through P_q P_k^-1: attention depends on the
cameras only through their relative projective transforms. A change of world frame X -> G X (G rigid) sends E to
E G^-1 and leaves P_q P_k^-1 as it was, so the outputs are invariant to the world frame (tested); within one view
P_q P_k^-1 = I, and those channels attend as if unencoded: PRoPE on a single image is the RoPE of its other half
(with the values turned and the output turned back, as in GTA; tested).
The second half is RoPE on the patch position: d/4 channels for the column index, d/4 for the row index, integer
token coordinates, frequencies 100^(-j/n), j = 0..n-1, n = d/8 pairs per axis (vispe's ``rope_axial`` ladder; GTA's
``so2='rope_axial'``). ``intrinsics=False`` drops K' (P = E): the reference's formula without intrinsics, GTA with
an unscaled translation.

Departure: K' keeps the skew s = K[0, 1] (s / W above), so P is the camera's exact projection. The reference's K'
keeps f_x, f_y, c_x and c_y only, and its inverse assumes no skew: a skewed K gives it the same attention as the
unskewed one. ``skew=False`` drops it the same way (tests/parity/test_parity_prope.py records both).

Conventions against the reference (prope/per_img_camera.py; tests/parity/test_parity_prope.py checks parity on
recorded outputs of the authors' code, ``tests/test_prope.py`` on a re-derivation): the projective blocks are
the same channels in the same order; the RoPE channels differ by a fixed permutation: the reference pairs channel j
of a d/4 block with channel j + d/8 ("split" halves) and turns the pair by -angle, vispe pairs neighbours (2j, 2j+1)
and turns by +angle, so reference (x_j, x_{j+d/8}) is vispe's (x_{2j+1}, x_{2j}). The learned q, k, v projections
absorb a fixed permutation; outputs agree to float32 rounding once it is applied. Prefix tokens (no camera) get the
identity, as in GTA.

Cost: as GTA's, with no parameter: the (B, V, 4, 4) blocks once per forward pass and layer, a float32 einsum over
the projective channels of q, k, v and the output, and the fused rotary kernel (``vispe.kernels.rotary``) on the
RoPE channels. CPU, a training step of the camera configs' tiny multi-view model (32 px, 2 views, batch 32, one
thread; ``tools/benchmark.py --model multiview``): 1.25x plucker's, below gta's 1.35x (its blocks come from the
cameras alone, with no learned scale), petr 1.18x. GPU: the same four passes over q, k, v and the output, not yet
measured.
"""

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
    """K' (..., 3, 3): pixel intrinsics K divided by the image width and height, principal point shifted by half
    the image (a centred camera's is at 0)."""
    h, w = image_size
    scale = torch.tensor([[1.0 / w, 0.0, -0.5], [0.0, 1.0 / h, -0.5], [0.0, 0.0, 1.0]], device=K.device)
    return scale @ K.float()


def lift(m: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) -> (..., 4, 4) with m in the top-left corner and 1 at (3, 3)."""
    return torch.nn.functional.pad(m, (0, 1, 0, 1)) + torch.nn.functional.pad(m.new_ones(1, 1), (3, 0, 3, 0))


@ENCODINGS.register_module(name='prope')
class PRoPE(ViewTransformAttention):
    """PRoPE: each token's camera projection P = K' E acting on half of each head's channels, as GTA's blocks, and
    RoPE of its patch position on the other half (module doc: the maths and the reference's conventions).

    Args:
        dim: model width.
        num_heads: heads; the head dim must divide by 8 (4-channel blocks, then two axes of pairs).
        intrinsics: include the normalised intrinsics K' (PRoPE); False: P = E, the reference's formula when it is given
            no intrinsics.
        theta: the RoPE half's frequency base (the reference's 100).
        skew: keep the intrinsics' skew K[0, 1] in K'; False drops it, as the reference does (module doc).

    Weight decay: nothing to declare, PRoPE has no parameters.

    Attention path: q, k and v are transformed before SDPA and the output after it, no mask: fused SDPA (flash or
    memory-efficient on CUDA).
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
        """rho = P^-1 = T lift(K'^-1) and its inverse P = lift(K') E, (B, V, 4, 4) float32."""
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
