"""LieRE: Lie rotational positional encodings (Ostmeier et al., "LieRE: Lie Rotational Positional Encodings",
ICML 2025; code: github.com/StanfordMIMI/LieRE).

Token n at normalised position x_n (ndim axes) has the rotation R(x_n) = exp(sum_a x_na A_a), one learned dense
skew-symmetric generator A_a per position axis, and q_n, k_n are replaced by R(x_n) q_n, R(x_n) k_n (the rotation
multiplies the channel vector from the left, as in the reference). Each A_a is block diagonal: J = d / b blocks of
b x b (b = ``block_size``) per head, every head and every layer its own. Unlike RoPE and ComRoPE the generators are
not constrained to commute, so R(x)^T R(y) is in general not R(y - x): q . k depends on both positions, not only on
their difference. What does hold: R(0) = I, every R(x) is orthogonal (norms of q and k are kept), and along one axis
(every other coordinate fixed at 0, or ndim = 1) R(x)^T R(y) = R(y - x), the encoding is exactly relative there
(``tests/test_liere.py`` checks all four, and that two axes are not relative at init).

Parameters (per layer): ``generators`` (ndim, H, J, b (b - 1) / 2), the strictly upper-triangular entries of each
block's A (row-major, ``torch.triu_indices(b, b, 1)``); A = U - U^T. The reference stores full (ndim, layers, H J,
b, b) tensors and reads only their strict upper triangles (its "- 0.5" cancels in U - U^T), heads major in H J:
``generators[a, h, j] = raw[a, layer, h * J + j][triu]`` turns its parameters into vispe's. Init: the reference's,
U(0, ``init_scale`` = 2 pi) per entry (every entry positive).

Positions, as the reference: per axis, grid index r of an n-token axis at training grid size g (``grid_size``,
from the backbone) maps to x = r (n / g) / (n - 1): [0, 1] at the training size with both ends included, [0, n / g]
at others (0 when n = 1). Without a training grid, g = n. Off a grid (points, sampled positions): min-max per
sample and axis to [0, 1] (vispe's choice; the reference has no point clouds). Prefix tokens get x = 0, the
identity, bit for bit (the reference prepends the same identity for its cls token).

Block sizes: the reference's CIFAR-100 script uses b = 64 (the whole head of its 64-dim heads), its ImageNet script
b = 8; vispe defaults to 8. b = 2 is RoPE-Mixed (2 x 2 skew generators commute): the angle table goes through the
fused rotary kernel. b = 4: the exponential in closed form (``exp_so4``: a skew 4 x 4 matrix splits into commuting
left and right quaternion multiplications, so exp(A) = L_exp(a) R_exp(b), exact, one 4 x 4 product instead of
``expm``'s ten). Other b >= 3: ``expm`` on (H, N, J, b, b). Then one batched block product over q and k. The head
dim must divide by b (the reference would leave the remainder unrotated; vispe refuses it).

Departure from the reference's full model: its Transformer loop replaces the per-layer table by layer 0's on the
first layer and then keeps it (``positional_transforms`` is reassigned inside the loop), so with
``rotary_embedding_per_layer`` every layer in fact uses layer 0's generators and the others get no gradient. vispe
gives each layer its own, the stated intent; per layer the two agree to 1e-5 on equal parameters.

Cost: the rotation tables depend on positions and parameters only, so they are computed once per forward pass and
layer and shared by the batch: H N J b x b exponentials (``expm``; at init norms, a spectral bound ~44 on a 14 x 14
grid: a degree-12 Taylor polynomial by Paterson-Stockmeyer and 5 squarings, 10 products of 8 x 8 matrices, and a
hand-written backward of twice as many), and a float32 block product over q and k. Per layer at ViT-S/16 224, batch
8, one CPU thread: ~33 ms for the exponentials forward + backward (61 ms with autograd through the former expm) and
~11 ms for the block products. CPU: 1.21-1.25x ape_learned (four runs; ViT-S/16 224, batch 8, float32,
1 thread, forward + backward; ``tools/benchmark.py``; 1.34x before), still above the 1.15 target of learned rotary
encodings; peak memory 902 MB against 459 MB (1050 MB before). b = 4 (closed form): 1.167x and 650 MB in the same
run that gave b = 8 1.210x and comrope_ap 1.107x (``--encodings ape_learned liere 'liere:block_size=4'
comrope_ap``), also just above the target: its block products and the quaternion tables remain. GPU: not measured.
Tried for b = 8 and measured no faster (1.213x against 1.200x): A(x) is linear in x, so the
Taylor polynomial is a polynomial in x whose matrix coefficients are the generators' word sums, one GEMM over 91
monomials instead of the per-token powers and Horner steps, with q and k rotated by one bmm; the 5 squarings (15 of
the ~30 products forward + backward) remain, and the word sums' autograd cost what the powers saved. Even per
token, the spectral radius at init (up to 38) needs the same 5 squarings. CPU inductor (``torch.compile`` of the
forward chain at degree 12 and 5 squarings, batch last) ran it in 14.7 ms against eager's 9.9; one bmm over q and k
together instead of the einsum per tensor made no difference in the model (1.214x against 1.209x, one run each).

Weight decay: none on ``generators``. The reference trains everything with plain Adam (weight decay 0); decay would
pull each generator toward 0, i.e. every rotation toward the identity and the encoding toward none.

Hook: rotate, q and k (B, H, N_total, d) -> same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe.encodings import block_rotations
from vispe.encodings.base import Encoding, check_heads
from vispe.encodings.rotary import rotate_by_rows, train_grid_from
from vispe.kernels.rotary import rotary_table, rotate_qk
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS


@ENCODINGS.register_module(name='liere')
class LieRE(Encoding):
    """LieRE: q and k of token n rotated by exp(sum_a x_na A_a), learned dense skew-symmetric A_a per axis, head and
    layer, block diagonal with b x b blocks (module doc: conventions, cost, parity with the reference).

    Weight decay: none on ``generators`` (the reference uses Adam without weight decay; decay would shrink every
    rotation toward the identity). Cost on CPU: 1.21-1.25x ape_learned at b = 8 and 1.17x at b = 4 (closed form;
    ViT-S/16 224, batch 8, float32; the 1.15 target is not met); on GPU: not measured.

    Attention path: q and k are rotated before SDPA, no mask: fused SDPA (flash or memory-efficient on CUDA).

    TorchScript: ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE; ``expm`` is a leaf there); its
    Python code does not script: its hook takes ``Positions`` (see VisionTransformerPE), and its float32 sections run
    in ``autocast_off``, a context TorchScript's ``with`` refuses.

    Args:
        dim: model width D; the head dim ``dim // num_heads`` must divide by ``block_size``.
        num_heads: heads of the attention; each head has its own generators.
        ndim: position axes: 2 for images (rows, columns), 3 for volumes or points.
        block_size: b, the size of each rotation block, at least 2 (2 is RoPE-Mixed; the reference runs 8 on ImageNet
            and 64 on CIFAR-100).
        grid_size: the training grid, ndim ints (supplied by the backbone): positions are [0, 1] across it and scale by
            n / g at other sizes, as in the reference.
        init_scale: generator entries start U(0, init_scale), the reference's 2 pi.
    """

    ndims: ClassVar[tuple[int, ...]] = (2, 3)
    needs_grid = False  # reads coordinates alone: points as well as grids
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ('generators',)
    upper: torch.Tensor  # buffer: flat indices i * b + j of the strict upper triangle, row-major
    train_size: torch.Tensor  # buffer (ndim,): the training grid, or empty when unknown

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        block_size: int = 8,
        grid_size: Sequence[int] | None = None,
        init_scale: float = 2 * math.pi,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads, 'liere')
        head_dim = dim // num_heads
        if block_size < 2 or head_dim % block_size:
            raise ValueError(
                f'liere: block_size must be >= 2 and divide the head dim {head_dim} (dim {dim} / {num_heads} heads), '
                f'got {block_size}; change block_size or num_heads'
            )
        if not init_scale > 0:
            raise ValueError(f'liere: init_scale must be > 0, got {init_scale}')
        self.num_heads, self.head_dim, self.ndim = num_heads, head_dim, ndim
        self.block_size, self.num_blocks, self.init_scale = block_size, head_dim // block_size, init_scale
        self.train_grid = train_grid_from(grid_size or None, ndim)  # () from point backbones: no grid
        rows, cols = torch.triu_indices(block_size, block_size, 1)
        self.register_buffer('upper', rows * block_size + cols, persistent=False)
        train = torch.tensor(self.train_grid if self.train_grid else [], dtype=torch.float32)
        self.register_buffer('train_size', train, persistent=False)
        pairs = block_size * (block_size - 1) // 2
        self.generators = nn.Parameter(torch.empty(ndim, num_heads, self.num_blocks, pairs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.generators.uniform_(0.0, self.init_scale)

    def skew_generators(self) -> torch.Tensor:
        """The blocks of A_a: (ndim, H, J, b, b) float32, A = U - U^T with U strictly upper triangular."""
        w, b = self.generators.float(), self.block_size
        shape = (self.ndim, self.num_heads, self.num_blocks, b * b)  # constants, not w.shape: FX traces w as a Proxy
        upper = w.new_zeros(shape).index_copy(-1, self.upper, w).unflatten(-1, (b, b))
        return upper - upper.transpose(-1, -2)

    def scale_grid(self, coords: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
        """Grid indices (..., ndim) on axes of ``span`` tokens -> r (n / g) / (n - 1) (module doc, Positions)."""
        ratio = span / self.train_size if self.train_grid is not None else torch.ones_like(span)
        return coords * ratio / (span - 1).clamp_min(1.0)

    def normalized_coords(self, pos: Positions) -> torch.Tensor:
        """(N, ndim) or (B, N, ndim) float32 positions (module doc, Positions)."""
        coords = pos.coords.float()
        if pos.on_grid:
            return self.scale_grid(coords, pos.span_tensor())
        lo = coords.amin(dim=-2, keepdim=True)  # no grid: min-max per sample and axis
        return (coords - lo) / (coords.amax(dim=-2, keepdim=True) - lo).clamp_min(1e-6)

    def angle_matrices(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """sum_a x_a A_a for positions x (..., N, ndim): (..., H, num_prefix + N, J, b, b); prefix rows 0."""
        x = F.pad(x.float(), [0, 0, num_prefix, 0]) if num_prefix else x.float()
        gen = self.skew_generators()  # (ndim, H, J, b, b)
        out = x @ gen.flatten(1)  # (..., N, H J b b)
        # contiguous: compiled matrix_exp on the moved (strided) view fails in a view of its decomposition
        return (
            out.unflatten(-1, (self.num_heads, self.num_blocks, self.block_size, self.block_size))
            .movedim(-5, -4)
            .contiguous()
        )

    def rotation(self, x: torch.Tensor, num_prefix: int = 0) -> torch.Tensor:
        """Blocks of R(x) = exp(sum_a x_a A_a): (..., H, num_prefix + N, J, b, b) float32; b = 4 in closed form
        (``exp_so4``), other sizes by ``expm``."""
        with autocast_off(x):
            if self.block_size == 4:
                return block_rotations.exp_so4(self.angle_matrices(x, num_prefix))
            # through the module: expm is an FX leaf (torch.fx.wrap patches block_rotations' global during tracing)
            return block_rotations.expm(self.angle_matrices(x, num_prefix))

    def angles(self, x: torch.Tensor) -> torch.Tensor:
        """b = 2: the rotation angle sum_a x_a A_a[1, 0] per block, (..., H, N, J) (A[1, 0] = -U[0, 1])."""
        return (
            (x.float() @ -self.generators.float()[..., 0].flatten(1))
            .unflatten(-1, (self.num_heads, -1))
            .movedim(-3, -2)
        )

    def apply_rotation(self, x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        """x (B, H, N, d) with block j of token n multiplied by rot[b, h, n, j], rot (B or 1, H, N, J, b, b) (as
        ``apply_blocks``, with the block shape from the module: under FX ``rot`` leaves the ``expm`` leaf without
        a known shape)."""
        blocks = x.float().unflatten(-1, (self.num_blocks, self.block_size))  # (B, H, N, J, b)
        return torch.einsum('xhnjab,xhnjb->xhnja', rot, blocks).flatten(-2).type_as(x)

    def rotate_normalized(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, num_prefix: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k (B, H, num_prefix + N, d) rotated by R(x) for positions x (N or B, N, ndim)."""
        with autocast_off(q):
            if self.block_size == 2:
                return rotate_qk(q, k, rotary_table(self.angles(x), num_prefix))
            # positions shared by the batch or per sample: (1 or B, N, ndim), so the table has a batch axis that
            # broadcasts (its rank then does not depend on x's, which FX cannot read)
            rot = self.rotation(x.reshape(-1, x.shape[-2], self.ndim), num_prefix)  # (1 or B, H, N, J, b, b)
            return self.apply_rotation(q, rot), self.apply_rotation(k, rot)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        layout = pos.layout
        if layout is not None and pos.key is not None:  # a mixed batch: one table row per distinct grid cell
            coords, sizes = layout.grid_cells(q.device)
            x = torch.cat([self.scale_grid(coords, sizes), coords.new_zeros(1, self.ndim)])  # (R, ndim)
            index = layout.table_index(q.device)  # (B, T): prefix and padding tokens on the last row, x = 0
            with autocast_off(q):
                if self.block_size == 2:
                    return rotate_by_rows(q, k, self.angles(x).movedim(0, 1), index)  # rows (R, H, J)
                rot = self.rotation(x).movedim(1, 0)[index].movedim(1, 2)  # (B, H, T, J, b, b)
                return self.apply_rotation(q, rot), self.apply_rotation(k, rot)
        x = self.normalized_coords(pos)
        if layout is not None:  # a mixed batch without a key: prefix and padding tokens at x = 0, the identity
            x = x * layout.patch_mask(x.device)[..., None]
        return self.rotate_normalized(q, k, x, pos.num_prefix)


__all__ = ['LieRE']
