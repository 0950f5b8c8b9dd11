"""STRING: separable translationally invariant position encodings (Schenck et al., ICML 2025).

R(x) = exp(sum_i x_i L_i) with commuting skew generators is R(x) = P RoPE_f(x) P^T, so q -> P^T q and k -> P^T k
precede the rotary kernel and every logit depends only on position differences. ``string_cayley``: P = (I - S)(I +
S)^-1, S learned per layer and head, 0 at init (the RoPE underneath exactly). ``string_circulant``: circulant
generators, so P = F^T, the fixed real Fourier basis, and pair k turns at a sine transform of the learned
coefficients (one d x d matmul per head, no FFT or complex dtype). ``fold_string`` folds P^T into the qkv projection
after training, leaving plain RoPE (``StringRoPE``).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from timm.layers.pos_embed_sincos import init_random_2d_freqs
from torch import nn

from vispe.encodings.base import Encoding, check_positive
from vispe.encodings.block_rotations import transform_heads
from vispe.encodings.points import point_frequencies
from vispe.encodings.rotary import VectorRoPE, axial_frequencies
from vispe.positions import Positions, autocast_off
from vispe.registry import ENCODINGS

FREQUENCY_MODES = ('mixed', 'axial')


def initial_frequencies(
    head_dim: int, num_heads: int, ndim: int, mode: str, theta: float, freq_scale: float
) -> torch.Tensor:
    """(ndim, H or 1, d/2) frequency vectors in coordinate order (row, col for images), those of the RoPE a STRING
    starts from: 2D 'axial' rope_axial's (pairs < d/4 turn with the column, the others with the row), 2D 'mixed'
    rope_mixed's random init (timm's ``init_random_2d_freqs``), 3D rope3d's of the same mode; times ``freq_scale``."""
    if ndim == 2:
        if mode == 'axial':
            w = axial_frequencies(head_dim, 2, theta)  # (d/4,)
            zero = torch.zeros_like(w)
            freqs = torch.stack([torch.cat([zero, w]), torch.cat([w, zero])])[:, None]  # (2, 1, d/2): row, col
        else:
            axial_frequencies(head_dim, 2, theta)  # validates the head dim
            col_row = init_random_2d_freqs(head_dim, 1, num_heads, temperature=theta)[:, 0]  # (2, H, d/2)
            freqs = col_row.flip(0)
        return freqs * freq_scale if freq_scale != 1.0 else freqs
    freqs = point_frequencies(head_dim, num_heads, ndim, mode, theta, freq_scale)
    return freqs if mode == 'mixed' else freqs[:, :1]


#: what ``fold_string`` leaves: RoPE with the STRING's frequency vectors
StringRoPE = VectorRoPE


class STRING(VectorRoPE):
    """The shared part of the STRING variants: q -> P^T q, k -> P^T k per head (``basis``), then ``VectorRoPE``'s
    rotation. Subclasses define ``init_basis`` and ``basis``.

    Args:
        dim: the attention's width; the head dim must divide by 4 for images and be at least 6 for points.
        num_heads: the attention's heads.
        ndim: position axes: 2 (images) or 3 (points).
        frequencies: the RoPE underneath: 'mixed' (learned, rope_mixed's or rope3d mixed's init) or 'axial' (fixed).
        theta: frequency base (None: 10 for 'mixed', 100 for 'axial').
        freq_scale: multiplies every initial frequency (None: 1 for images, 8 rad per unit for points).
        prefix: 'none' (unrotated) or 'centroid'; None: 'none' for images, 'centroid' for points.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ndim: int = 2,
        frequencies: str = 'mixed',
        theta: float | None = None,
        freq_scale: float | None = None,
        prefix: str | None = None,
    ) -> None:
        owner = self.registry_name()
        self.check_head_dim(dim // num_heads)
        if frequencies not in FREQUENCY_MODES:
            raise ValueError(f'{owner}: frequencies must be one of {list(FREQUENCY_MODES)}, got {frequencies!r}')
        if ndim not in self.ndims:
            raise ValueError(f'{owner} is defined here for 2D (images) and 3D (points) positions, got ndim={ndim}')
        check_positive(owner, theta=theta, freq_scale=freq_scale)
        head_dim = dim // num_heads
        theta = float(theta if theta is not None else (100.0 if frequencies == 'axial' else 10.0))
        freq_scale = float(freq_scale if freq_scale is not None else (1.0 if ndim == 2 else 8.0))
        freqs = initial_frequencies(head_dim, num_heads, ndim, frequencies, theta, freq_scale)
        default_prefix = 'none' if ndim == 2 else 'centroid'
        super().__init__(freqs, prefix or default_prefix, learned=frequencies == 'mixed')
        self.head_dim, self.num_heads, self.ndim = head_dim, num_heads, ndim
        self.mode, self.theta, self.freq_scale = frequencies, theta, freq_scale
        self.init_basis()

    def check_head_dim(self, head_dim: int) -> None:
        """ValueError for a head dim the variant cannot take (before anything else is checked)."""

    def init_basis(self) -> None:
        """Create the variant's parameters of P (the RoPE underneath exists already)."""
        raise NotImplementedError

    def basis(self) -> torch.Tensor:
        """B = P^T, (H or 1, d, d) float32 orthogonal: q -> B q before the rotation."""
        raise NotImplementedError

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast_off(q):
            b = self.basis().expand(self.num_heads, -1, -1)
            q, k = transform_heads(q, b), transform_heads(k, b)
        return super().rotate(q, k, pos)

    def folded(self) -> StringRoPE:
        """The plain RoPE that remains once ``basis`` is folded into the q and k projections."""
        freqs = self.frequencies().detach().clone()
        return VectorRoPE(freqs, self.prefix, learned=self.mode == 'mixed').to(freqs.device)

    def extra_repr(self) -> str:
        return f'frequencies={self.mode}, theta={self.theta:g}, freq_scale={self.freq_scale:g}, prefix={self.prefix}'


@ENCODINGS.register_module(name='string_cayley')
class CayleySTRING(STRING):
    """Cayley-STRING: P = (I - S)(I + S)^-1, S = A - A^T learned per layer and head, A = 0 at init (the RoPE underneath
    bit for bit); P^T from one linear solve per forward pass.

    Arguments: as `STRING`.
    """

    no_weight_decay_params = ('A', 'freqs')
    weight_decay_note = "freqs as rope_mixed's; decay on A would pull each head back to RoPE"

    def init_basis(self) -> None:
        self.A = nn.Parameter(torch.zeros(self.num_heads, self.head_dim, self.head_dim))

    def skew(self) -> torch.Tensor:
        """S = A - A^T, (H, d, d) float32."""
        a = self.A.float()
        return a - a.transpose(-1, -2)

    def basis(self) -> torch.Tensor:
        """P^T = (I - S)^-1 (I + S) = (I + S)(I - S)^-1 (the two factors commute), by a linear solve."""
        s = self.skew()
        eye = torch.eye(s.shape[-1], device=s.device, dtype=s.dtype)
        return torch.linalg.solve(eye - s, eye + s)


@ENCODINGS.register_module(name='string_circulant')
class CirculantSTRING(STRING):
    """Circulant-STRING: circulant generators with learned first columns ``coeffs[i, h]``, applied as F^T RoPE_f(x) F.
    The coefficients start at the inverse sine transform of the options' RoPE frequencies; 2 of the d channels never
    turn; fixed with ``frequencies='axial'``.

    Arguments: as `STRING`.
    """

    no_weight_decay_params = ('coeffs',)
    weight_decay_note = 'the frequencies in another basis'
    coeffs: torch.Tensor  # parameter ('mixed') or buffer ('axial'), (ndim, H or 1, d)
    sines: torch.Tensor  # buffer (d/2, d)
    fourier: torch.Tensor  # buffer (d, d)

    def check_head_dim(self, head_dim: int) -> None:
        circulant_bases(head_dim)  # refuses an odd one

    def init_basis(self) -> None:
        sines, fourier = circulant_bases(self.head_dim)
        self.register_buffer('sines', sines, persistent=False)
        self.register_buffer('fourier', fourier, persistent=False)
        # the coefficients whose sine transform is RoPE's frequencies (pair 0's rate dropped) replace them
        coeffs = self.freqs.detach() @ sines / sines.shape[-1]
        del self.freqs
        if self.mode == 'mixed':
            self.coeffs = nn.Parameter(coeffs)
        else:
            self.register_buffer('coeffs', coeffs, persistent=False)

    def frequencies(self) -> torch.Tensor:
        """f = 2 c S^T, (ndim, H or 1, d/2) float32: each pair's rate per axis (pair 0 always 0)."""
        return 2.0 * (self.coeffs.float() @ self.sines.float().transpose(0, 1))

    def basis(self) -> torch.Tensor:
        return self.fourier.float()[None]

    def generators(self) -> torch.Tensor:
        """The dense skew circulants L_i = C_i - C_i^T, (ndim, H or 1, d, d) float32 (for tests and analysis):
        C[a, b] = c[(a - b) mod d]."""
        c = self.coeffs.float()
        d = c.shape[-1]
        idx = (torch.arange(d)[:, None] - torch.arange(d)[None, :]) % d
        circ = c[..., idx.to(c.device)]
        return circ - circ.transpose(-1, -2)


def circulant_bases(head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sine matrix S (d/2, d), S[k, m] = sin(2 pi m k / d), and the orthonormal real Fourier basis F (d, d) whose
    rows 2k, 2k + 1 span the k-th rotation plane of every real skew circulant (module doc), both float32."""
    if head_dim % 2 or head_dim < 2:
        raise ValueError(f'string_circulant needs an even head dim (embed_dim / num_heads), got {head_dim}')
    d = head_dim
    m = torch.arange(d, dtype=torch.float64)
    k = torch.arange(d // 2, dtype=torch.float64)[:, None]
    phase = 2 * math.pi * m * k / d  # (d/2, d)
    rows = torch.stack([phase.cos(), phase.sin()], dim=1) * math.sqrt(2 / d)  # (d/2, 2, d): u_k, v_k
    rows[0, 0] = 1 / math.sqrt(d)  # the constant vector
    rows[0, 1] = torch.cos(math.pi * m) / math.sqrt(d)  # the alternating vector (frequency d/2)
    return phase.sin().float(), rows.reshape(d, d).float()


@torch.no_grad()
def fold_string(model: nn.Module) -> nn.Module:
    """Fold every STRING's P^T into the q and k rows (weights and bias) of its attention's qkv projection and replace
    the encoding by the plain RoPE of its frequencies (``StringRoPE``), in place; outputs unchanged up to rounding. The
    state dict changes with it. ValueError where the fold would change outputs: a q/k norm after the projection, or
    another rotating encoding before the STRING.
    """
    for module in model.modules():
        if not all(hasattr(module, a) for a in ('pe', 'qkv', 'num_heads', 'head_dim', 'q_norm', 'k_norm')):
            continue  # not a vispe attention (duck-typed: the encodings sit below vispe.attention)
        attn = cast(Any, module)
        names = [n for n, e in attn.pe.items() if isinstance(e, STRING)]
        if not names:
            continue
        rotating = [n for n, e in attn.pe.items() if isinstance(e, Encoding) and 'rotate' in e.active_hooks()]
        if len(names) > 1 or rotating[0] != names[0]:
            raise ValueError(f'fold_string: the STRING must be the first and only rotating encoding, got {rotating}')
        if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)):
            raise ValueError('fold_string: a q/k norm sits between the qkv projection and STRING; it cannot be folded')
        enc = attn.pe[names[0]]
        assert isinstance(enc, STRING)
        heads, d = attn.num_heads, attn.head_dim
        b = enc.basis().double().expand(heads, -1, -1)  # (H, d, d)
        weight = attn.qkv.weight
        for part in (0, 1):  # q, k
            rows = slice(part * heads * d, (part + 1) * heads * d)
            w = weight[rows].double().reshape(heads, d, -1)
            weight[rows] = (b @ w).reshape(heads * d, -1).to(weight.dtype)
            if attn.qkv.bias is not None:
                bias = attn.qkv.bias
                v = bias[rows].double().reshape(heads, d, 1)
                bias[rows] = (b @ v).reshape(-1).to(bias.dtype)
        attn.pe[names[0]] = enc.folded()
    return model


__all__ = ['STRING', 'CayleySTRING', 'CirculantSTRING', 'StringRoPE', 'circulant_bases', 'fold_string']
