"""The two diffusion objectives' maths; time runs from data (0) to noise, samplers integrate it backwards.

- ``flow``: rectified flow / linear-path flow matching (Liu et al. 2023; Lipman et al. 2023; SiT), t ~ U[0, 1]; the
  backbone predicts v = eps - x0 at ``num_train_timesteps * t``; Euler or Heun steps from 1 to 0 on a uniform grid.
- ``ddpm``: DDPM (Ho et al. 2020) with DiT's betas, linear 1e-4 to 0.02 over T = 1000 (scaled by 1000 / T),
  t ~ U{0, ..., T - 1}; the backbone predicts eps at integer t; DDIM (eta = 0) from T - 1 to 0, then the clean image.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor
TimeLike = float | Tensor
#: ``fn(x, t) -> prediction`` with t a float (flow time in [0, 1], or a DDPM timestep index)
PredictFn = Callable[[Tensor, float], Tensor]


def _per_sample(t: TimeLike, x: Tensor) -> Tensor:
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    return t.reshape(-1, *([1] * (x.dim() - 1))) if t.dim() else t


# ----------------------------------------------------------------------------------------------------------------
# Flow matching
# ----------------------------------------------------------------------------------------------------------------


def flow_interpolate(x0: Tensor, eps: Tensor, t: TimeLike) -> Tensor:
    """The linear path ``x_t = (1 - t) x0 + t eps``; t scalar or (B,)."""
    t = _per_sample(t, x0)
    return (1 - t) * x0 + t * eps


def flow_target(x0: Tensor, eps: Tensor) -> Tensor:
    return eps - x0


def euler_step(velocity: PredictFn, x: Tensor, t: float, t_next: float) -> Tensor:
    return x + (t_next - t) * velocity(x, t)


def heun_step(velocity: PredictFn, x: Tensor, t: float, t_next: float) -> Tensor:
    """One Heun step (explicit trapezoid, 2nd order, two evaluations) of ``dx/dt = velocity(x, t)``."""
    d = velocity(x, t)
    x_euler = x + (t_next - t) * d
    return x + (t_next - t) * 0.5 * (d + velocity(x_euler, t_next))


FLOW_STEPS = {'euler': euler_step, 'heun': heun_step}


def flow_sample(velocity: PredictFn, noise: Tensor, steps: int, sampler: str = 'euler') -> Tensor:
    step = FLOW_STEPS[sampler]
    times = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64).tolist()
    x = noise
    for t, t_next in zip(times[:-1], times[1:]):
        x = step(velocity, x, t, t_next)
    return x


# ----------------------------------------------------------------------------------------------------------------
# DDPM / DDIM
# ----------------------------------------------------------------------------------------------------------------


def ddpm_schedule(num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    """``alphas_cumprod`` (float64, (T,)) of the linear beta schedule; betas scale by 1000 / T as in DiT."""
    scale = 1000.0 / num_timesteps
    betas = torch.linspace(scale * beta_start, scale * beta_end, num_timesteps, dtype=torch.float64)
    return torch.cumprod(1.0 - betas, dim=0)


def ddpm_interpolate(x0: Tensor, eps: Tensor, alpha_bar: TimeLike) -> Tensor:
    """``x_t = sqrt(ab) x0 + sqrt(1 - ab) eps``; alpha_bar scalar or (B,)."""
    ab = _per_sample(alpha_bar, x0)
    return ab.sqrt() * x0 + (1 - ab).sqrt() * eps


def ddim_step(x: Tensor, eps: Tensor, alpha_bar: TimeLike, alpha_bar_prev: TimeLike) -> Tensor:
    """One deterministic DDIM step (eta = 0) from noise level ``alpha_bar`` to ``alpha_bar_prev`` (less noise)."""
    ab, ab_prev = _per_sample(alpha_bar, x), _per_sample(alpha_bar_prev, x)
    x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
    return ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * eps


def ddim_timesteps(steps: int, num_timesteps: int = 1000) -> list[int]:
    """``steps`` evenly spaced timesteps from T - 1 down to 0 (both included when steps > 1)."""
    if not 1 <= steps <= num_timesteps:
        raise ValueError(f'DDIM needs 1 <= steps <= {num_timesteps}, got {steps}')
    return torch.linspace(num_timesteps - 1, 0, steps, dtype=torch.float64).round().long().tolist()


def ddim_sample(eps_fn: PredictFn, noise: Tensor, alphas_cumprod: Tensor, steps: int) -> Tensor:
    timesteps = ddim_timesteps(steps, len(alphas_cumprod))
    x = noise
    for i, t in enumerate(timesteps):
        ab_prev = float(alphas_cumprod[timesteps[i + 1]]) if i + 1 < len(timesteps) else 1.0
        x = ddim_step(x, eps_fn(x, float(t)), float(alphas_cumprod[t]), ab_prev)
    return x


# ----------------------------------------------------------------------------------------------------------------
# Objectives: what the network learns, at which times, and how to sample from it
# ----------------------------------------------------------------------------------------------------------------
