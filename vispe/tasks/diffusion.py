"""Class-conditional image diffusion as an mmengine model: flow matching (default) or DDPM (``vispe.tasks.samplers``)
with classifier-free guidance, ``out = out_null + s * (out_cond - out_null)``; label ``num_classes`` is the null class.
The backbone is ``net(x, t, y, crop=None) -> (B, C or 2C, H, W)``; of 2C outputs (learned sigma) the first C are used.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel
from torch import nn

from vispe.registry import MODELS
from vispe.tasks.samplers import (
    PredictFn,
    Tensor,
    TimeLike,
    ddim_sample,
    ddpm_interpolate,
    ddpm_schedule,
    flow_interpolate,
    flow_sample,
    flow_target,
)


class Objective(nn.Module):
    """What an objective provides to ``DiffusionModel`` (``FlowMatching``, ``DDPM``); it holds no parameters."""

    #: the sampler names ``sample`` accepts, and the one used when none is given
    samplers: ClassVar[tuple[str, ...]] = ()
    default_sampler: ClassVar[str] = ''

    def train_times(self, n: int, device: torch.device) -> Tensor:
        raise NotImplementedError

    def eval_times(self, n: int) -> Tensor:
        """(n,) deterministic times, stratified over the objective's range (held-out losses)."""
        raise NotImplementedError

    def corrupt(self, x0: Tensor, eps: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """(x_t, target): the noised input at times ``t`` and what the network should predict from it."""
        raise NotImplementedError

    def net_time(self, t: TimeLike) -> TimeLike:
        """The time as the backbone sees it."""
        raise NotImplementedError

    def noise_level(self, t: Tensor) -> Tensor:
        """The time as a float in [0, 1], 1 at pure noise and 0 at data (the DiT's positions carry it: DyPE)."""
        raise NotImplementedError

    def sample(self, predict: PredictFn, noise: Tensor, steps: int, sampler: str) -> Tensor:
        raise NotImplementedError


class FlowMatching(Objective):
    """Linear-path flow matching; the network predicts the velocity ``eps - x0``."""

    samplers = ('euler', 'heun')
    default_sampler = 'heun'

    def __init__(self, num_train_timesteps: int = 1000) -> None:
        super().__init__()
        self.time_scale = float(num_train_timesteps)

    def train_times(self, n: int, device: torch.device) -> Tensor:
        return torch.rand(n, device=device)

    def eval_times(self, n: int) -> Tensor:
        return (torch.arange(n, dtype=torch.float64) + 0.5).div(n).float()  # stratified over [0, 1]

    def corrupt(self, x0: Tensor, eps: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        return flow_interpolate(x0, eps, t), flow_target(x0, eps)

    def net_time(self, t: TimeLike) -> TimeLike:
        return t * self.time_scale

    def noise_level(self, t: Tensor) -> Tensor:
        return t.float()

    def sample(self, predict: PredictFn, noise: Tensor, steps: int, sampler: str) -> Tensor:
        return flow_sample(predict, noise, steps, sampler)


class DDPM(Objective):
    """DDPM with the linear schedule; the network predicts eps."""

    samplers = ('ddim',)
    default_sampler = 'ddim'
    alphas_cumprod: Tensor  # buffer (T,)

    def __init__(self, num_train_timesteps: int = 1000) -> None:
        super().__init__()
        self.num_timesteps = int(num_train_timesteps)
        # derived table: rebuilt from the arguments, never stored in checkpoints
        self.register_buffer('alphas_cumprod', ddpm_schedule(self.num_timesteps).float(), persistent=False)

    def train_times(self, n: int, device: torch.device) -> Tensor:
        return torch.randint(0, self.num_timesteps, (n,), device=device)

    def eval_times(self, n: int) -> Tensor:
        return ((torch.arange(n, dtype=torch.float64) + 0.5) * (self.num_timesteps / n)).long()

    def corrupt(self, x0: Tensor, eps: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        return ddpm_interpolate(x0, eps, self.alphas_cumprod[t].to(x0.dtype)), eps

    def net_time(self, t: TimeLike) -> TimeLike:
        return t.float() if isinstance(t, Tensor) else float(t)

    def noise_level(self, t: Tensor) -> Tensor:
        """t / (T - 1): vispe's mapping of the DDPM index onto DyPE's time (1 at the first DDIM step, 0 at the last)."""
        return t.float() / max(self.num_timesteps - 1, 1)

    def sample(self, predict: PredictFn, noise: Tensor, steps: int, sampler: str) -> Tensor:
        return ddim_sample(predict, noise, ddpm_schedule(self.num_timesteps), steps)


OBJECTIVES: dict[str, type[Objective]] = {'flow': FlowMatching, 'ddpm': DDPM}


# ----------------------------------------------------------------------------------------------------------------
# The mmengine model
# ----------------------------------------------------------------------------------------------------------------


@MODELS.register_module()
class DiffusionModel(BaseModel):
    """Wraps a denoising backbone (``MODELS.build(backbone)``, e.g. vispe's DiT) for mmengine's Runner.

    Batches are dicts ``{'inputs': (B, C, H, W) in [-1, 1], 'labels': (B,), 'crop': optional (B, 4)}``; without labels,
    unconditional. ``mode='loss'``: ``{'loss': ...}``; ``'predict'``: one ``{loss, t, label}`` per sample
    (``DenoisingLoss``); ``'tensor'``: the prediction on the same deterministic noising.

    Args:
        backbone: config of a network ``net(x, t, y, crop=None)`` with ``num_classes``; one taking ``noise_level`` also
            gets the time in [0, 1].
        objective: 'flow' (velocity, rectified flow) or 'ddpm' (eps, linear betas).
        num_train_timesteps: T; the backbone sees times in [0, T].
        class_dropout: probability of a training label becoming the null label (vispe's DiT drops labels itself).
        val_seed: seed of the noise in 'predict' / 'tensor' (times stratified), so held-out losses compare.
        data_preprocessor: mmengine data preprocessor config.
        init_cfg: mmengine weight-initialisation config; None: the modules' own.
    """

    def __init__(
        self,
        backbone: dict[str, Any],
        objective: str = 'flow',
        num_train_timesteps: int = 1000,
        class_dropout: float = 0.0,
        val_seed: int = 0,
        data_preprocessor: dict | None = None,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        if objective not in OBJECTIVES:
            raise ValueError(f'unknown objective {objective!r}; valid objectives: {sorted(OBJECTIVES)}')
        if not 0.0 <= class_dropout <= 1.0:
            raise ValueError(f'class_dropout must be in [0, 1], got {class_dropout}')
        self.backbone = MODELS.build(backbone)
        if not hasattr(self.backbone, 'num_classes'):
            raise ValueError(f'{type(self.backbone).__name__} has no num_classes attribute (the null label index)')
        self.num_classes = int(self.backbone.num_classes)
        # the DiT takes the time in [0, 1] too (``noise_level``, for DyPE); a backbone without that argument gets none
        self._noise_level_arg = 'noise_level' in inspect.signature(self.backbone.forward).parameters
        self.objective = OBJECTIVES[objective](num_train_timesteps)
        self.class_dropout = class_dropout
        self.val_seed = val_seed

    # -- training and validation ---------------------------------------------------------------------------------

    def forward(
        self,
        inputs: Tensor,
        labels: Tensor | None = None,
        crop: Tensor | None = None,
        mode: str = 'tensor',
    ) -> Tensor | dict[str, Tensor] | list[dict[str, Tensor]]:
        if mode not in ('loss', 'predict', 'tensor'):
            raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")
        B = inputs.shape[0]
        y = self._labels(labels, B, inputs.device)
        if mode == 'loss':
            t = self.objective.train_times(B, inputs.device)
            eps = torch.randn_like(inputs)
            if self.training and self.class_dropout > 0:
                drop = torch.rand(B, device=inputs.device) < self.class_dropout
                y = torch.where(drop, torch.full_like(y, self.num_classes), y)
        else:  # deterministic: own generator (the global RNG is left alone), stratified times
            generator = torch.Generator().manual_seed(self.val_seed)
            eps = torch.randn(inputs.shape, generator=generator).to(inputs)
            t = self.objective.eval_times(B).to(inputs.device)
        x_t, target = self.objective.corrupt(inputs, eps, t)  # (B, C, H, W) each
        pred = self._backbone(x_t, self.objective.net_time(t), y, crop, t)[:, : inputs.shape[1]]
        if mode == 'tensor':
            return pred
        if mode == 'loss':
            return {'loss': F.mse_loss(pred.float(), target.float())}
        losses = (pred.detach().float() - target.float()).pow(2).flatten(1).mean(1)  # (B,)
        return [{'loss': loss, 't': ti, 'label': yi} for loss, ti, yi in zip(losses, t, y)]

    def _backbone(self, x: Tensor, t_net: TimeLike, y: Tensor, crop: Tensor | None, t: Tensor) -> Tensor:
        if self._noise_level_arg:
            return self.backbone(x, t_net, y, crop=crop, noise_level=self.objective.noise_level(t))
        return self.backbone(x, t_net, y, crop=crop)

    def _labels(self, labels: Tensor | Sequence[int] | None, batch: int, device: torch.device) -> Tensor:
        if labels is None:
            return torch.full((batch,), self.num_classes, dtype=torch.long, device=device)
        labels = torch.as_tensor(labels, device=device).long().reshape(-1)
        if labels.numel() != batch:
            raise ValueError(f'got {labels.numel()} labels for a batch of {batch}')
        return labels

    # -- sampling ------------------------------------------------------------------------------------------------

    def denoise(
        self, x: Tensor, t: TimeLike, labels: Tensor, crop: Tensor | None = None, cfg_scale: float = 1.0
    ) -> Tensor:
        """The backbone's (first C channels') prediction at objective time ``t``, with classifier-free guidance."""
        B, C = x.shape[:2]
        t_net = torch.as_tensor(self.objective.net_time(t), dtype=torch.float32, device=x.device).expand(B).clone()
        t = torch.as_tensor(t, device=x.device)  # one time for the whole batch: ()
        if cfg_scale == 1.0:  # exactly the conditional model: no null pass
            return self._backbone(x, t_net, labels, crop, t)[:, :C]
        null = torch.full_like(labels, self.num_classes)
        crop2 = None if crop is None else torch.cat([crop, crop])
        out = self._backbone(torch.cat([x, x]), torch.cat([t_net, t_net]), torch.cat([labels, null]), crop2, t)
        cond, uncond = out[:, :C].chunk(2)
        return uncond + cfg_scale * (cond - uncond)

    @torch.no_grad()
    def sample(
        self,
        labels: Tensor | Sequence[int],
        size: int | tuple[int, int] | None = None,
        steps: int = 50,
        sampler: str | None = None,
        cfg_scale: float = 1.0,
        generator: torch.Generator | None = None,
        crop: Tensor | None = None,
        noise: Tensor | None = None,
    ) -> Tensor:
        """Generate images in [-1, 1] (clamped), one per label (``num_classes``: unconditional), in eval mode, from
        ``noise`` (B, C, H, W) or from noise drawn with ``generator`` at ``size`` (int or (H, W)). ``steps``:
        integration steps (flow; Heun evaluates twice per step) or DDIM timesteps (ddpm); ``sampler``: 'euler' or
        'heun' (flow, default 'heun'), 'ddim' (ddpm); ``cfg_scale``: the guidance scale s (1: the plain conditional
        model); ``crop``: (B, 4) or (4,) boxes passed to the backbone."""
        sampler = sampler or self.objective.default_sampler
        if sampler not in self.objective.samplers:
            raise ValueError(
                f'sampler {sampler!r} does not fit this objective; valid samplers: {self.objective.samplers}'
            )
        if steps < 1:
            raise ValueError(f'steps must be >= 1, got {steps}')
        device = self._device()
        if noise is None:
            noise = self._noise(len(labels), size, generator, device)
        B = noise.shape[0]
        y = self._labels(labels, B, device)
        if bool(((y < 0) | (y > self.num_classes)).any()):
            raise ValueError(f'labels must be in [0, {self.num_classes}] ({self.num_classes} = unconditional)')
        if crop is not None:
            crop = torch.as_tensor(crop, dtype=torch.float32, device=device).reshape(-1, 4).expand(B, 4)
        was_training = self.training
        self.eval()
        try:
            x = self.objective.sample(
                lambda x, t: self.denoise(x, t, y, crop, cfg_scale), noise.to(device, torch.float32), steps, sampler
            )
        finally:
            self.train(was_training)
        return x.clamp(-1.0, 1.0)

    def _noise(
        self, batch: int, size: int | tuple[int, int] | None, generator: torch.Generator | None, device
    ) -> Tensor:
        if size is None:
            raise ValueError('sample() needs size=(H, W) (or an int) when no noise is given')
        H, W = (size, size) if isinstance(size, int) else tuple(size)
        channels = getattr(self.backbone, 'in_chans', None) or getattr(self.backbone, 'in_channels', None)
        if channels is None:
            raise ValueError(f'{type(self.backbone).__name__} has no in_chans / in_channels; pass noise= instead')
        noise_device = generator.device if generator is not None else device
        return torch.randn((batch, int(channels), H, W), generator=generator, device=noise_device).to(device)

    def _device(self) -> torch.device:
        first = next(itertools.chain(self.parameters(), self.buffers()), None)
        return first.device if first is not None else self.data_preprocessor.device


__all__ = ['DDPM', 'DiffusionModel', 'FlowMatching', 'Objective']
