"""The rotary encodings' frequency maths: the fixed ladders and their split over the axes, and the resolution
strategies as pure functions of one axis' scale s_a (``GridRoPE.axis_scales``), applied by
``GridRoPE.strategy_factors``. d_a: the rotary dims of axis a; w_k: the frequency of its pair k (0 = fastest).

- ``none``: positions simply extend or stop short.
- ``interpolate`` (PI, Chen et al. 2023): w_k / s_a, above and below the training size.
- ``ntk`` (bloc97 2023): theta' = theta s_a^(d_a / (d_a - 2)), i.e. w_k s_a^(-2k / (d_a - 2)).
- ``yarn`` (Peng et al. 2023) as transformers' ``_compute_yarn_parameters``: w'_k = (1 - g_k) w_k / s_a + g_k w_k
  with g_k a ramp over the pair index between the pairs turning 32 and 1 times over the training extent
  (``correction_ramp``), and q, k each times 0.1 ln s + 1 (``yarn_mscale``) at the axes' geometric mean scale.
- ``yarn_paper``: the paper's ramp, in each pair's rotations r_k: g_k = clamp((r_k - 1) / 31, 0, 1).
- ``dype_ntk``, ``dype_yarn`` (DyPE, Issachar et al. 2025, as its authors' code): NTK with its exponent times
  2 kappa(t), and a two-ramp vision YaRN, following the diffusion time t through kappa(t) = t^2.

``ntk``, ``yarn`` and DyPE's act only above the training size (s_a = max(1, r_a)). Departures from the references,
tested in tests/parity: a ramp whose end passes the end of the ladder is clamped at both ends (the references turn it
over), and the temperature is one factor at the geometric mean of the axis scales (DyPE: one per axis).
docs/encodings/rotary.md explains each strategy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

#: YaRN's ramp, in rotations over the training extent: pairs above BETA_FAST extrapolate, below BETA_SLOW interpolate
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
#: DyPE's schedule (module doc): kappa(t) = t^DYPE_TIME_EXPONENT; dype_ntk raises NTK's factor to DYPE_SCALE kappa
DYPE_TIME_EXPONENT = 2.0
DYPE_SCALE = 2.0
#: DyPE's vision YaRN, in rotations over the training extent (times kappa): the ramp from PI to NTK, then the ramp
#: from that blend back to the trained frequencies
DYPE_NTK_RAMP = (1.25, 0.75)
DYPE_BASE_RAMP = (16.0, 2.0)
#: the strategies that follow the diffusion time
DYPE_STRATEGIES = ('dype_ntk', 'dype_yarn')


def axial_frequencies(head_dim: int, ndim: int, theta: float) -> torch.Tensor:
    """w_k = 1 / theta^(k / (d / (2 ndim))), k < d / (2 ndim): for 2D, 1 / theta^(4k/d)."""
    if head_dim % (2 * ndim):
        raise ValueError(
            f'rotary encodings need a head dim (embed_dim / num_heads) divisible by {2 * ndim} for {ndim}D positions '
            f'(a pair of channels per frequency and axis), got {head_dim}; change embed_dim or num_heads'
        )
    return frequency_ladder(head_dim // (2 * ndim), theta)


def frequency_ladder(pairs: int, theta: float) -> torch.Tensor:
    """One axis' (pairs,) float32 ladder 1 / theta^(k / pairs), k < pairs."""
    return 1.0 / theta ** (torch.arange(pairs, dtype=torch.float32) / pairs)


def random_rotation(ndim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A uniformly random (ndim, ndim) rotation matrix (QR of a Gaussian matrix with the signs fixed, det +1)."""
    q, r = torch.linalg.qr(torch.randn(ndim, ndim, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q.float()


def rotary_sections(head_dim: int, ndim: int, sections: Sequence[int] | None = None) -> tuple[int, ...]:
    """Channel pairs per position axis in coordinate order, summing to d/2; None: an even split, the last axes taking
    one pair more (a head dim of 64 in 3D: (10, 11, 11))."""
    if head_dim % 2 or head_dim < 2 * ndim:
        raise ValueError(
            f'rotary encodings need an even head dim (embed_dim / num_heads) of at least {2 * ndim} for {ndim}D '
            f'positions (a pair of channels per frequency, one or more per axis), got {head_dim}; change embed_dim '
            'or num_heads'
        )
    pairs = head_dim // 2
    if sections is None:
        base, extra = divmod(pairs, ndim)
        return tuple(base + (a >= ndim - extra) for a in range(ndim))
    sections = tuple(int(n) for n in sections)
    if len(sections) != ndim or min(sections) < 1 or sum(sections) != pairs:
        raise ValueError(
            f'sections={sections} must give each of the {ndim} position axes at least one channel pair and add up to '
            f'the head dim / 2 = {pairs}; e.g. sections={rotary_sections(head_dim, ndim)}'
        )
    return sections


def train_grid_from(grid_size: Sequence[int] | None, ndim: int) -> tuple[int, ...] | None:
    """The training grid as a tuple of ndim ints (None stays None)."""
    if grid_size is None:
        return None
    grid = tuple(int(g) for g in grid_size)
    if len(grid) != ndim or min(grid) < 1:
        raise ValueError(f'grid_size must be {ndim} positive ints (one per position axis), got {tuple(grid_size)}')
    return grid


def ntk_theta(theta: float, scale: float, axis_dims: int) -> float:
    """NTK-aware base: theta' = theta * s^(d_a / (d_a - 2)), d_a = rotary dims per axis."""
    if axis_dims <= 2:  # one pair per axis: its frequency is theta^0 = 1 whatever the base
        return theta
    return theta * scale ** (axis_dims / (axis_dims - 2))


def ntk_factors(ranks: torch.Tensor, scale: float, axis_dims: int, kappa: torch.Tensor | None = None) -> torch.Tensor:
    """Multipliers s^(-2k / (d_a - 2)) for pairs of frequency rank k (0 = fastest): what ``ntk_theta`` does to
    w_k = 1 / theta^(2k / d_a), for frequencies that have no theta (learned ones). With DyPE's ``kappa`` (a tensor
    of any shape that broadcasts in front of ``ranks``' dims), the exponent is multiplied by DYPE_SCALE kappa."""
    if axis_dims <= 2:
        return torch.ones_like(ranks, dtype=torch.float32)
    exponent = -2.0 * ranks.float() / (axis_dims - 2)
    if kappa is not None:
        exponent = exponent * (DYPE_SCALE * kappa)
    return scale**exponent


def descending_ranks(values: torch.Tensor) -> torch.Tensor:
    """Rank (0 = largest) of each of the (..., n) values along the last dim."""
    return values.argsort(dim=-1, descending=True).argsort(dim=-1)


def correction_ramp(
    rotations: torch.Tensor,
    ranks: torch.Tensor,
    fast: float | torch.Tensor,
    slow: float | torch.Tensor,
    high_cap: str,
) -> torch.Tensor:
    """The references' YaRN ramp over one ladder (the last dim of ``rotations``, each pair's turns over the training
    extent): 0 keeps a pair's frequency, 1 interpolates it, linear in the pair index (``ranks``, 0 = fastest) from
    floor(k(fast)) to ceil(k(slow)), k(beta) = ln(r_0 / beta) / ln(1 / rho) the index of the pair turning beta times
    (r_0, rho from the fastest and slowest pair). Both ends are clamped into [0, cap], cap 2n - 1 (``high_cap='dims'``,
    transformers') or n (``'pairs'``, DyPE's); ``fast`` and ``slow`` may be tensors broadcasting in front.
    """
    r = rotations.detach().double()
    n = r.shape[-1]
    ranks = ranks.double()
    top = r.amax(dim=-1, keepdim=True)
    step = ((top / r.amin(dim=-1, keepdim=True).clamp_min(1e-300)).log() / max(n - 1, 1)).clamp_min(1e-12)
    fast, slow = torch.as_tensor(fast, dtype=torch.float64), torch.as_tensor(slow, dtype=torch.float64)
    cap = float(2 * n - 1 if high_cap == 'dims' else n)
    low = ((top / fast).log() / step).floor().clamp(0.0, cap)
    high = ((top / slow).log() / step).ceil().clamp(0.0, cap)
    ramp = torch.where(high > low, ((ranks - low) / (high - low)).clamp(0.0, 1.0), (ranks > high).double())
    return ramp.float()


def per_group(
    fn: Callable[[torch.Tensor], torch.Tensor], values: torch.Tensor, groups: int | Sequence[int]
) -> torch.Tensor:
    """``fn`` applied to each block of consecutive pairs of the (..., P) ``values``: ``groups`` blocks of P / groups
    pairs, or blocks of the given sizes; the results concatenated back."""
    sizes = [values.shape[-1] // groups] * groups if isinstance(groups, int) else list(groups)
    parts = [fn(part) for part in values.split(sizes, dim=-1)]
    lead = torch.broadcast_shapes(*(p.shape[:-1] for p in parts))  # DyPE: a batch axis in front
    return torch.cat([p.expand(*lead, p.shape[-1]) for p in parts], dim=-1)


def yarn_factors(
    freqs: torch.Tensor, scale: float, train_len: float, groups: int | Sequence[int] = 1, ramp: str = 'reference'
) -> torch.Tensor:
    """YaRN multipliers (1 - g_k) / s + g_k for the angular frequencies ``freqs`` (..., P) (their magnitudes count)
    over the training extent ``train_len``. ``ramp='reference'`` (``yarn``): g_k = 1 - ``correction_ramp`` at
    beta_fast = 32 and beta_slow = 1 rotations, ladders of consecutive pairs as ``groups`` (``per_group``), as
    transformers' ``_compute_yarn_parameters``; ``'paper'`` (``yarn_paper``): the paper's equation,
    g_k = clamp((r_k - 1) / (32 - 1), 0, 1) in the rotations r_k of each pair."""
    rotations = train_len * freqs.detach().abs().float() / (2 * math.pi)
    if ramp == 'paper':
        gamma = ((rotations - YARN_BETA_SLOW) / (YARN_BETA_FAST - YARN_BETA_SLOW)).clamp(0.0, 1.0)
        return (1.0 - gamma) / scale + gamma

    def one(r: torch.Tensor) -> torch.Tensor:
        ramp = correction_ramp(r, descending_ranks(r), YARN_BETA_FAST, YARN_BETA_SLOW, 'dims')
        return ramp / scale + (1.0 - ramp)

    return per_group(one, rotations, groups)


def dype_yarn_factors(
    freqs: torch.Tensor, scale: float, train_len: float, kappa: torch.Tensor, groups: int | Sequence[int] = 1
) -> torch.Tensor:
    """DyPE's vision YaRN multipliers at kappa(t) (module doc): a ramp from PI (1 / s) to NTK between
    ``DYPE_NTK_RAMP`` rotations, then a ramp back to the trained frequency (1) between ``DYPE_BASE_RAMP``, every
    threshold times kappa; ladders as ``groups``, ``kappa`` broadcasting in front of ``freqs``' dims."""
    rotations = train_len * freqs.detach().abs().float() / (2 * math.pi)

    def one(r: torch.Tensor) -> torch.Tensor:
        ranks = descending_ranks(r)  # one ladder's order serves the NTK factors and both ramps
        ntk = ntk_factors(ranks, scale, 2 * r.shape[-1])
        to_ntk = 1.0 - correction_ramp(r, ranks, DYPE_NTK_RAMP[0] * kappa, DYPE_NTK_RAMP[1] * kappa, 'pairs')
        blend = (1.0 - to_ntk) / scale + to_ntk * ntk
        to_base = 1.0 - correction_ramp(r, ranks, DYPE_BASE_RAMP[0] * kappa, DYPE_BASE_RAMP[1] * kappa, 'pairs')
        return (1.0 - to_base) * blend + to_base

    return per_group(one, rotations, groups)


def yarn_mscale(scale: float) -> float:
    """YaRN's attention temperature (Peng et al. 2023): sqrt(1/t) = 0.1 ln s + 1, what q and k are each multiplied
    by, so that the logits grow by (0.1 ln s + 1)^2; 1 for s <= 1."""
    return 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0


def frequency_ranks(magnitudes: torch.Tensor, groups: int | Sequence[int]) -> torch.Tensor:
    """Rank (0 = largest) of each of the (..., P) magnitudes within its block of consecutive pairs (``per_group``)."""
    return per_group(descending_ranks, magnitudes, groups)


__all__ = [
    'DYPE_BASE_RAMP',
    'DYPE_NTK_RAMP',
    'DYPE_SCALE',
    'DYPE_STRATEGIES',
    'DYPE_TIME_EXPONENT',
    'YARN_BETA_FAST',
    'YARN_BETA_SLOW',
    'axial_frequencies',
    'correction_ramp',
    'descending_ranks',
    'dype_yarn_factors',
    'frequency_ladder',
    'frequency_ranks',
    'ntk_factors',
    'ntk_theta',
    'per_group',
    'random_rotation',
    'rotary_sections',
    'train_grid_from',
    'yarn_factors',
    'yarn_mscale',
]
