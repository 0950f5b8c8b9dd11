"""Diffusion task: flow matching and DDPM maths on analytic Gaussian fields, CFG, determinism, loss, metric, Runner.

For data x0 ~ N(mu, s^2) (independently per pixel) every quantity is known in closed form. Flow (x_t = (1 - t) x0 +
t eps): x_t ~ N(a mu, V) with a = 1 - t, V = a^2 s^2 + t^2, and the exact velocity is
    E[eps - x0 | x_t] = -mu + (t - a s^2) / V * (x_t - a mu);
its ODE maps the noise z at t = 1 to mu + s z at t = 0. DDPM (x_t = sqrt(ab) x0 + sqrt(1 - ab) eps): V = ab s^2 +
1 - ab and E[eps | x_t] = sqrt(1 - ab) / V * (x_t - sqrt(ab) mu); the DDIM ODE maps z to (nearly) mu + s z too.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from mmengine.runner import LogProcessor, Runner
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vispe.engine.checkpoint import read_checkpoint
from vispe.engine.metrics import DenoisingLoss
from vispe.registry import METRICS, MODELS
from vispe.tasks.diffusion import DiffusionModel
from vispe.tasks.samplers import (
    ddim_sample,
    ddim_step,
    ddim_timesteps,
    ddpm_interpolate,
    ddpm_schedule,
    euler_step,
    flow_interpolate,
    flow_sample,
    flow_target,
    heun_step,
)

MU, S = 0.4, 0.3
NUM_CLASSES = 4


def gaussian_velocity(x, t, mu=MU, s=S):
    a = 1 - t
    V = a * a * s * s + t * t
    return -mu + (t - a * s * s) / V * (x - a * mu)


def gaussian_eps(x, alpha_bar, mu=MU, s=S):
    V = alpha_bar * s * s + 1 - alpha_bar
    return (1 - alpha_bar) ** 0.5 / V * (x - alpha_bar**0.5 * mu)


@MODELS.register_module(force=True)
class TinyDenoiser(nn.Module):
    """A conv net with time and label conditioning, DiT's call signature; records the labels it is called with."""

    def __init__(self, in_chans: int = 3, num_classes: int = NUM_CLASSES, hidden: int = 16, learn_sigma: bool = False):
        super().__init__()
        self.in_chans, self.num_classes = in_chans, num_classes
        self.label = nn.Embedding(num_classes + 1, hidden)
        self.time = nn.Linear(1, hidden)
        self.inp = nn.Conv2d(in_chans, hidden, 3, padding=1)
        self.out = nn.Conv2d(hidden, in_chans * (2 if learn_sigma else 1), 3, padding=1)
        self.seen, self.crops = [], []

    def forward(self, x, t, y, crop=None):
        assert t.shape == y.shape == (x.shape[0],) and t.dtype.is_floating_point and y.dtype == torch.long
        self.seen.append(y.detach().clone())
        self.crops.append(crop)
        cond = self.label(y) + self.time(t[:, None] / 1000.0)  # (B, hidden)
        return self.out(F.silu(self.inp(x) + cond[:, :, None, None]))


@MODELS.register_module(force=True)
class GaussianField(nn.Module):
    """The exact flow velocity or DDPM eps of N(mu, s^2) data, whatever the label; counts its calls."""

    def __init__(self, objective: str = 'flow', in_chans: int = 3, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.objective, self.in_chans, self.num_classes = objective, in_chans, num_classes
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device
        self.calls = 0

    def forward(self, x, t, y, crop=None):
        self.calls += 1
        t = t.double().view(-1, 1, 1, 1)
        if self.objective == 'flow':
            return gaussian_velocity(x.double(), t / 1000.0).to(x.dtype)
        alpha_bar = ddpm_schedule()[t.long().flatten()].view(-1, 1, 1, 1)
        return gaussian_eps(x.double(), alpha_bar).to(x.dtype)


def tiny_model(objective='flow', **backbone):
    return DiffusionModel(backbone=dict(type='TinyDenoiser', **backbone), objective=objective)


# ---------------------------------------------------------------------------------------------------------------
# flow matching maths
# ---------------------------------------------------------------------------------------------------------------


def test_flow_path_endpoints_and_velocity():
    x0, eps = torch.randn(2, 3, 4, 4, dtype=torch.float64), torch.randn(2, 3, 4, 4, dtype=torch.float64)
    assert torch.equal(flow_interpolate(x0, eps, 0.0), x0)
    assert torch.equal(flow_interpolate(x0, eps, 1.0), eps)
    t = torch.tensor([0.25, 0.7], dtype=torch.float64)
    assert torch.allclose(flow_interpolate(x0, eps, t)[1], 0.3 * x0[1] + 0.7 * eps[1])
    h = 1e-6  # the target is the path's time derivative, pointing from data to noise
    fd = (flow_interpolate(x0, eps, t + h) - flow_interpolate(x0, eps, t - h)) / (2 * h)
    assert torch.allclose(fd, flow_target(x0, eps), atol=1e-8)
    assert torch.equal(flow_target(x0, eps), eps - x0)


def test_gaussian_velocity_is_the_conditional_mean():
    """The closed form used by the sampler tests is E[eps - x0 | x_t] (checked by Monte Carlo regression)."""
    g = torch.Generator().manual_seed(1)
    x0 = MU + S * torch.randn(200_000, generator=g, dtype=torch.float64)
    eps = torch.randn(200_000, generator=g, dtype=torch.float64)
    t = 0.6
    x_t, v = flow_interpolate(x0, eps, t), flow_target(x0, eps)
    slope = torch.cov(torch.stack([x_t, v]))[0, 1] / x_t.var()  # least squares of v on x_t
    fit = v.mean() + slope * (x_t - x_t.mean())
    assert (fit - gaussian_velocity(x_t, t)).abs().max() < 0.02


@pytest.mark.parametrize('sampler', ['euler', 'heun'])
def test_flow_sampler_turns_noise_into_the_data_distribution(sampler):
    z = torch.randn(20_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = flow_sample(gaussian_velocity, z, steps=100 if sampler == 'euler' else 10, sampler=sampler)
    assert abs(x.mean() - MU) < 0.02 and abs(x.std() - S) < 0.01
    assert (x - (MU + S * z)).abs().max() < 0.03  # the exact transport map, sample by sample


def test_heun_beats_euler_and_converges_at_second_order():
    z = torch.randn(5000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = MU + S * z

    def error(sampler, steps):
        return (flow_sample(gaussian_velocity, z, steps, sampler) - exact).abs().max().item()

    for steps in (5, 10, 20):
        assert error('heun', steps) < 0.2 * error('euler', steps)
    assert 3.0 < error('heun', 10) / error('heun', 20) < 5.0  # halving the step divides the error by ~4
    assert 1.7 < error('euler', 20) / error('euler', 40) < 2.3  # first order: by ~2


def test_single_steps_on_a_linear_field():
    """dx/dt = -x from x(1) = 1 to t = 0.5: exact e^0.5; Euler 1.5; Heun 1 + 0.5 * (1 + 1.5) / 2 = 1.625."""
    x = torch.ones(3)
    calls = []

    def field(x, t):
        calls.append(t)
        return -x

    assert torch.allclose(euler_step(field, x, 1.0, 0.5), torch.full((3,), 1.5))
    assert torch.allclose(heun_step(field, x, 1.0, 0.5), torch.full((3,), 1.625))
    assert calls == [1.0, 1.0, 0.5]


# ---------------------------------------------------------------------------------------------------------------
# DDPM maths
# ---------------------------------------------------------------------------------------------------------------


def test_ddpm_linear_schedule_known_values():
    ab = ddpm_schedule()
    assert ab.shape == (1000,) and ab.dtype == torch.float64
    assert ab[0].item() == pytest.approx(1 - 1e-4)
    assert ab[-1].item() == pytest.approx(4.0358e-5, rel=1e-3)  # DiT's / diffusers' linear schedule
    betas = 1 - ab[1:] / ab[:-1]
    assert betas[-1].item() == pytest.approx(0.02) and torch.allclose(betas.diff(), betas.diff()[0].expand(998))
    ab500 = ddpm_schedule(500)  # betas scale with 1000 / T (Improved DDPM, DiT)
    assert 1 - ab500[0].item() == pytest.approx(2e-4) and 1 - (ab500[-1] / ab500[-2]).item() == pytest.approx(0.04)
    x0, eps = torch.randn(2, 3), torch.randn(2, 3)
    a = torch.tensor([0.25, 0.64])
    assert torch.allclose(ddpm_interpolate(x0, eps, a), a.sqrt()[:, None] * x0 + (1 - a).sqrt()[:, None] * eps)


def test_ddim_step_recovers_x0_with_the_true_eps():
    x0, eps = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    x_t = ddpm_interpolate(x0, eps, 0.3)
    assert torch.allclose(ddim_step(x_t, eps, 0.3, 1.0), x0)
    assert torch.allclose(ddim_step(x_t, eps, 0.3, 0.8), ddpm_interpolate(x0, eps, 0.8))
    assert ddim_timesteps(10) == [999, 888, 777, 666, 555, 444, 333, 222, 111, 0]
    with pytest.raises(ValueError):
        ddim_timesteps(0)


@pytest.mark.parametrize('steps', [1, 3, 10])
def test_samplers_follow_a_single_known_path_exactly(steps):
    """With the true (x0, eps) pair as the prediction, both paths are followed exactly to x0, however few steps."""
    x0, eps = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    for sampler in ('euler', 'heun'):
        assert torch.allclose(flow_sample(lambda x, t: eps - x0, eps, steps, sampler), x0, atol=1e-12)
    ab = ddpm_schedule()
    x_T = ddpm_interpolate(x0, eps, ab[-1].item())
    assert torch.allclose(ddim_sample(lambda x, t: eps, x_T, ab, steps), x0, atol=1e-10)


def test_ddim_turns_noise_into_the_data_distribution():
    z = torch.randn(20_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ab = ddpm_schedule()

    def eps_fn(x, t):
        return gaussian_eps(x, ab[int(t)].item())

    x = ddim_sample(eps_fn, z, ab, steps=250)
    assert abs(x.mean() - MU) < 0.02 and abs(x.std() - S) < 0.01
    coarse = (ddim_sample(eps_fn, z, ab, steps=50) - (MU + S * z)).abs().max()
    assert (x - (MU + S * z)).abs().max() < 0.5 * coarse  # more steps, closer to the exact map


# ---------------------------------------------------------------------------------------------------------------
# DiffusionModel: sampling
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('objective, sampler, steps, tol', [('flow', 'heun', 20, 0.01), ('ddpm', 'ddim', 250, 0.04)])
def test_model_sample_follows_the_exact_field(objective, sampler, steps, tol):
    """Through the model: the time scaling handed to the backbone and the step direction are right."""
    model = DiffusionModel(backbone=dict(type='GaussianField', objective=objective), objective=objective)
    noise = torch.randn(8, 3, 6, 5, generator=torch.Generator().manual_seed(0))
    x = model.sample(torch.arange(8) % NUM_CLASSES, noise=noise, steps=steps, sampler=sampler)
    assert x.shape == noise.shape and x.dtype == torch.float32
    assert (x - (MU + S * noise).clamp(-1, 1)).abs().max() < tol
    assert x.min() >= -1 and x.max() <= 1  # clamped
    assert model.backbone.calls == (2 * steps if sampler == 'heun' else steps)


def test_euler_and_heun_samplers_through_the_model():
    model = DiffusionModel(backbone=dict(type='GaussianField'))
    noise = torch.randn(16, 3, 4, 4, generator=torch.Generator().manual_seed(0)) * 0.5
    exact = MU + S * noise
    euler = (model.sample([0] * 16, noise=noise, steps=10, sampler='euler') - exact).abs().max()
    heun = (model.sample([0] * 16, noise=noise, steps=10, sampler='heun') - exact).abs().max()
    assert heun < 0.2 * euler
    with pytest.raises(ValueError, match='sampler'):
        model.sample([0], noise=noise[:1], sampler='ddim')


def test_cfg_scale_one_is_the_conditional_model_without_a_null_pass():
    model = tiny_model()
    x, y = torch.randn(3, 3, 8, 8), torch.tensor([0, 1, 3])
    with torch.no_grad():
        expected = model.backbone(x, torch.full((3,), 500.0), y)
        model.backbone.seen.clear()
        out = model.denoise(x, 0.5, y, cfg_scale=1.0)
    assert torch.equal(out, expected)
    assert len(model.backbone.seen) == 1 and torch.equal(model.backbone.seen[0], y)
    model.backbone.seen.clear()
    model.sample(y, size=8, steps=3, sampler='euler')
    assert len(model.backbone.seen) == 3 and all((s != NUM_CLASSES).all() for s in model.backbone.seen)


@pytest.mark.parametrize('scale', [0.0, 2.5, 4.0])
def test_cfg_combines_conditional_and_null_predictions(scale):
    model = tiny_model(learn_sigma=True)
    x, y = torch.randn(3, 3, 8, 8), torch.tensor([0, 1, 3])
    t = torch.full((3,), 250.0)
    with torch.no_grad():
        cond = model.backbone(x, t, y)[:, :3]
        uncond = model.backbone(x, t, torch.full_like(y, NUM_CLASSES))[:, :3]
        out = model.denoise(x, 0.25, y, cfg_scale=scale)
    assert not torch.allclose(cond, uncond)  # the labels matter, so the test can fail
    assert out.shape == (3, 3, 8, 8)
    assert torch.allclose(out, uncond + scale * (cond - uncond), atol=1e-5)
    model.backbone.seen.clear(), model.backbone.crops.clear()
    model.sample(y, size=8, steps=2, sampler='heun', cfg_scale=scale, crop=[0.0, 0.25, 0.5, 0.75])
    assert len(model.backbone.seen) == 4
    assert all(s.tolist() == [0, 1, 3] + [NUM_CLASSES] * 3 for s in model.backbone.seen)
    assert all(c.tolist() == [[0.0, 0.25, 0.5, 0.75]] * 6 for c in model.backbone.crops)  # one box per row


def test_sampling_is_deterministic_under_a_seeded_generator():
    model = tiny_model()
    model.train()

    def draw(seed, **kw):
        return model.sample([0, 1], (8, 6), steps=4, generator=torch.Generator().manual_seed(seed), **kw)

    a, b, c = draw(0), draw(0), draw(1)
    assert a.shape == (2, 3, 8, 6)
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert model.training  # sample() restores the mode it found
    noise = torch.randn((2, 3, 8, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model.sample([0, 1], steps=4, noise=noise), a)  # a generator only draws the noise
    with pytest.raises(ValueError, match='labels'):
        model.sample([0, NUM_CLASSES + 1], size=8, steps=1)


def test_ddpm_model_samples_with_ddim():
    model = tiny_model('ddpm')
    x = model.sample([0, 1, 2], 8, steps=5, generator=torch.Generator().manual_seed(0), cfg_scale=2.0)
    assert x.shape == (3, 3, 8, 8) and torch.isfinite(x).all()
    with pytest.raises(ValueError, match='sampler'):
        model.sample([0], 8, sampler='heun')


# ---------------------------------------------------------------------------------------------------------------
# DiffusionModel: training and validation
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('objective', ['flow', 'ddpm'])
def test_loss_is_finite_and_backpropagates(objective):
    model = tiny_model(objective, learn_sigma=True)
    crop = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.1, 0.2, 0.5, 0.5]]).repeat(2, 1)
    batch = dict(inputs=torch.rand(4, 3, 8, 8) * 2 - 1, labels=torch.tensor([0, 1, 2, 3]), crop=crop)
    loss = model(**batch, mode='loss')['loss']
    assert model.backbone.crops[-1] is crop
    assert loss.ndim == 0 and torch.isfinite(loss) and loss > 0
    loss.backward()
    for name in ('inp.weight', 'time.weight', 'out.weight'):
        assert model.backbone.get_parameter(name).grad.abs().sum() > 0, name
    sigma_grad = model.backbone.out.weight.grad[3:]  # learned-sigma channels are not part of the loss
    assert torch.equal(sigma_grad, torch.zeros_like(sigma_grad))


def test_flow_training_target_reaches_the_backbone():
    """The loss is MSE(net(x_t, 1000 t, y), eps - x0): a backbone that returns the target gets loss 0."""

    class Oracle(nn.Module):
        num_classes = NUM_CLASSES

        def forward(self, x, t, y, crop=None):
            tt = (t / 1000).view(-1, 1, 1, 1)
            return (x - x0) / tt  # x_t = (1 - t) x0 + t eps gives eps - x0 = (x_t - x0) / t

    x0 = torch.rand(4, 3, 8, 8) * 2 - 1
    model = tiny_model()
    model.backbone = Oracle()
    assert model(x0, torch.zeros(4, dtype=torch.long), mode='loss')['loss'] < 1e-6
    per_sample = model(x0, torch.zeros(4, dtype=torch.long), mode='predict')
    assert max(float(p['loss']) for p in per_sample) < 1e-6


def test_class_dropout_feeds_the_null_label():
    batch = dict(inputs=torch.zeros(64, 3, 4, 4), labels=torch.zeros(64, dtype=torch.long))
    for p, check in ((0.0, lambda y: (y == 0).all()), (1.0, lambda y: (y == NUM_CLASSES).all())):
        model = DiffusionModel(backbone=dict(type='TinyDenoiser'), class_dropout=p)
        model(**batch, mode='loss')
        assert check(model.backbone.seen[-1])
    model = DiffusionModel(backbone=dict(type='TinyDenoiser'), class_dropout=0.5)
    model(**batch, mode='loss')
    assert 0 < (model.backbone.seen[-1] == NUM_CLASSES).sum() < 64
    model(**batch, mode='predict')  # validation sees the true labels
    assert (model.backbone.seen[-1] == 0).all()
    model(batch['inputs'], mode='loss')  # no labels: unconditional
    assert (model.backbone.seen[-1] == NUM_CLASSES).all()


@pytest.mark.parametrize('objective', ['flow', 'ddpm'])
def test_predict_is_deterministic_and_leaves_the_global_rng_alone(objective):
    model = tiny_model(objective).eval()
    batch = dict(inputs=torch.rand(5, 3, 8, 8) * 2 - 1, labels=torch.tensor([0, 1, 2, 3, 0]))
    state = torch.get_rng_state()
    first = model(**batch, mode='predict')
    second = model(**batch, mode='predict')
    assert torch.equal(torch.get_rng_state(), state)
    assert len(first) == 5 and all(torch.isfinite(p['loss']) for p in first)
    assert [float(p['loss']) for p in first] == [float(p['loss']) for p in second]
    times = torch.stack([p['t'] for p in first]).float()
    assert times.unique().numel() == 5  # stratified over the batch
    assert torch.equal(model(**batch, mode='tensor'), model(**batch, mode='tensor'))
    assert model(**batch, mode='tensor').shape == (5, 3, 8, 8)
    reseeded = DiffusionModel(backbone=dict(type='TinyDenoiser'), objective=objective, val_seed=1)
    reseeded.load_state_dict(model.state_dict())
    assert [float(p['loss']) for p in reseeded(**batch, mode='predict')] != [float(p['loss']) for p in first]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match='objective'):
        DiffusionModel(backbone=dict(type='TinyDenoiser'), objective='edm')
    with pytest.raises(ValueError, match='mode'):
        tiny_model()(torch.zeros(1, 3, 4, 4), mode='sample')
    with pytest.raises(ValueError, match='size'):
        tiny_model().sample([0])


def test_denoising_loss_metric_averages_per_sample():
    metric = METRICS.build(dict(type='DenoisingLoss'))
    assert isinstance(metric, DenoisingLoss)
    metric.process({}, [{'loss': torch.tensor(1.0)}, {'loss': torch.tensor(2.0)}])
    metric.process({}, [{'loss': torch.tensor(6.0)}])
    assert metric.evaluate(3) == {'denoising/mse': pytest.approx(3.0)}
    # a key mmengine's LogProcessor would log as a running mean over past validations (loss, time, ...) is avoided
    assert not re.search(LogProcessor().mean_pattern, 'denoising/mse')
    with pytest.raises(ValueError, match='no predictions'):
        metric.evaluate(0)


# ---------------------------------------------------------------------------------------------------------------
# mmengine Runner: 3 iterations with EMA, validation and a checkpoint
# ---------------------------------------------------------------------------------------------------------------


class Blobs(Dataset):
    def __init__(self, n=12, size=8):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, size, size, generator=g) * 2 - 1
        self.crops = torch.tensor([0.0, 0.0, 1.0, 1.0]).expand(n, 4)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {'inputs': self.images[i], 'labels': i % NUM_CLASSES, 'crop': self.crops[i]}


@pytest.mark.parametrize('backbone', ['TinyDenoiser', 'DiT'])
def test_runner_trains_validates_and_saves_ema(tmp_path, backbone):
    if backbone == 'DiT':
        pytest.importorskip('vispe.backbones.dit')
        cfg = dict(type='DiT', img_size=8, patch_size=2, embed_dim=32, depth=1, num_heads=2, num_classes=NUM_CLASSES)
    else:
        cfg = dict(type='TinyDenoiser')
    model = DiffusionModel(backbone=cfg)
    runner = Runner(
        model=model,
        work_dir=str(tmp_path),
        train_dataloader=DataLoader(Blobs(), batch_size=4, shuffle=True),
        val_dataloader=DataLoader(Blobs(8), batch_size=4),
        val_evaluator=dict(type='DenoisingLoss'),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.0)),
        train_cfg=dict(by_epoch=False, max_iters=3, val_interval=3),
        val_cfg=dict(),
        custom_hooks=[dict(type='EMAHook', momentum=0.25)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=3, by_epoch=False)),
        log_processor=dict(by_epoch=False),
        default_scope='vispe',
        experiment_name=f'diffusion_{backbone}',
    )
    runner.train()
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert math.isfinite(loss)
    ckpt = read_checkpoint(str(tmp_path / 'iter_3.pth'))  # weights_only=True with vispe's allow-list
    ema = next(h for h in runner.hooks if type(h).__name__ == 'EMAHook').ema_model.module.state_dict()
    online = model.state_dict()
    assert set(ckpt['state_dict']) == set(online)
    # at save time EMAHook swaps: 'state_dict' holds the EMA weights, 'ema_state_dict' the online ones
    assert all(torch.equal(ckpt['state_dict'][k], ema[k].cpu()) for k in online)
    assert all(torch.equal(ckpt['ema_state_dict'][f'module.{k}'], online[k].cpu()) for k in online)
    assert any(not torch.equal(ema[k], online[k]) for k in online)

    # Runner.val() re-runs EMAHook.before_run, which copies the online weights into a fresh EMA model: from here on
    # the EMA weights of this run live only in the checkpoint
    first, second = runner.val(), runner.val()
    assert set(first) == {'denoising/mse'} and math.isfinite(first['denoising/mse'])
    assert first == second  # validation is reproducible
