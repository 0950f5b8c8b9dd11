"""DyPE (Issachar et al. 2025): the timestep schedules of NTK and YaRN (``dype_ntk``, ``dype_yarn``) on rope_axial and
rope_mixed. Properties: at t = 1 DyPE's vision YaRN or NTK with twice its exponent (the authors' lambda_s = 2);
at t = 0 the trained frequencies; in between each frequency moves monotonically between the two; a time per sample
is each sample's own; the DiT's sampler hands the time to the positions, and a compiled DiT does not recompile
when it changes."""

from __future__ import annotations

import pytest
import torch

from vispe.backbones.dit import DiT
from vispe.encodings.rope import RoPEAxial, RoPEMixed
from vispe.encodings.rotary_core import axial_frequencies
from vispe.encodings.rotary_scaling import ntk_theta
from vispe.evaluation.trained_model import available_strategies
from vispe.positions import grid_positions
from vispe.tasks.diffusion import DiffusionModel

TRAIN, TEST = (4, 4), (8, 12)  # scales 2 (rows) and 3 (columns)


def axial(strategy: str) -> RoPEAxial:
    enc = RoPEAxial(64, 2, theta=100.0, grid_size=TRAIN)
    enc.strategy = strategy
    return enc


def axis_freqs(enc, level: float | None):
    """Per axis the frequencies rope_axial uses on the TEST grid at diffusion time ``level``."""
    pos = grid_positions(*TEST)
    if level is not None:
        pos.noise_level = torch.tensor(level)
    scales = enc.axis_scales(pos.coords, pos.grid)
    return enc.axis_frequencies(scales, enc.dype_kappa(pos))


def test_dype_yarn_is_the_trained_frequencies_at_the_last_step_and_keeps_the_temperature() -> None:
    """The tables at t = 1, 0.5 and near 0 are compared with the authors' in tests/parity/test_parity_dype.py."""
    for dype, base in zip(axis_freqs(axial('dype_yarn'), 0.0), axis_freqs(axial('none'), None)):
        torch.testing.assert_close(dype, base)
    assert axial('dype_yarn').mscale((2.0, 3.0)) == axial('yarn').mscale((2.0, 3.0)) > 1  # temperature kept


def test_dype_ntk_is_the_authors_base_factor_to_the_power_two_kappa() -> None:
    """The authors' code: theta' = theta * base_ntk^(2 t^2), base_ntk = s^(d_a / (d_a - 2)); twice NTK's exponent at
    t = 1, none at t = 0."""
    enc = axial('dype_ntk')
    for t in (1.0, 0.5):
        for axis, (s, freqs) in enumerate(zip((2.0, 3.0), axis_freqs(enc, t))):
            ntk_base = ntk_theta(100.0, s, enc.axis_dims[axis]) / 100.0  # s^(d_a / (d_a - 2))
            expected = axial_frequencies(64 // 2, 2, 100.0 * ntk_base ** (2 * t**2))
            torch.testing.assert_close(freqs, expected)
    for dype, base in zip(axis_freqs(enc, 0.0), axis_freqs(axial('none'), None)):
        torch.testing.assert_close(dype, base)


@pytest.mark.parametrize('strategy', ['dype_ntk', 'dype_yarn'])
def test_each_frequency_moves_monotonically_towards_the_trained_one_as_sampling_ends(strategy: str) -> None:
    enc = axial(strategy)
    levels = torch.linspace(1.0, 0.0, 11)
    for axis in range(2):
        path = torch.stack([axis_freqs(enc, float(t))[axis] for t in levels])  # (11, d_a/2), t from 1 down to 0
        assert (path.diff(dim=0) >= -1e-7).all(), f'axis {axis}: a frequency fell as t went down'
        torch.testing.assert_close(path[-1], enc.ladder(axis))
        assert (path[0] <= enc.ladder(axis) + 1e-7).all() and (path[0] < enc.ladder(axis)).any()


@pytest.mark.parametrize('cls', [RoPEAxial, RoPEMixed])
@pytest.mark.parametrize('strategy', ['dype_ntk', 'dype_yarn'])
def test_a_time_per_sample_gives_each_sample_its_own_table(cls, strategy: str) -> None:
    torch.manual_seed(0)
    enc = cls(64, 2, grid_size=TRAIN)
    enc.strategy = strategy
    q, k = torch.randn(3, 2, TEST[0] * TEST[1], 32), torch.randn(3, 2, TEST[0] * TEST[1], 32)
    levels = torch.tensor([1.0, 0.6, 0.0])
    pos = grid_positions(*TEST)
    pos.noise_level = levels
    together = enc.rotate(q, k, pos)
    for b, level in enumerate(levels):
        one = grid_positions(*TEST)
        one.noise_level = level
        alone = enc.rotate(q[b : b + 1], k[b : b + 1], one)
        for x, y in zip(together, alone):
            torch.testing.assert_close(x[b : b + 1], y)
    # the first and last samples differ (t = 1 scales, t = 0 does not), so the per-sample path is not one table
    assert not torch.allclose(together[0][0], together[0][2])


def test_without_a_diffusion_time_the_strategy_says_where_it_belongs() -> None:
    enc = axial('dype_yarn')
    with pytest.raises(ValueError, match="follows the diffusion time, and these positions carry none.*'ntk' or 'yarn'"):
        enc.table(grid_positions(*TEST))
    plain = torch.nn.Sequential(axial('none'))
    assert 'dype_yarn' in available_strategies(plain, opt_in=True)
    assert 'dype_yarn' not in available_strategies(plain)  # opt-in: a classifier's sweep leaves it out


def tiny_dit(encoding: str = 'rope_axial') -> DiT:
    return DiT(
        img_size=16, patch_size=4, in_chans=3, embed_dim=32, depth=2, num_heads=2, num_classes=3, encoding=encoding
    )


@pytest.mark.parametrize('objective', ['flow', 'ddpm'])
def test_the_sampler_hands_each_step_its_time_in_zero_one(objective: str, monkeypatch) -> None:
    model = DiffusionModel(
        backbone=dict(
            type='DiT',
            img_size=16,
            patch_size=4,
            embed_dim=32,
            depth=2,
            num_heads=2,
            num_classes=3,
            encoding='rope_axial',
        ),
        objective=objective,
        num_train_timesteps=100,
    )
    for enc in model.backbone.modules():
        if isinstance(enc, RoPEAxial):
            enc.strategy = 'dype_yarn'
    seen: list[float] = []
    original = RoPEAxial.dype_kappa

    def spy(self, pos):
        seen.append(float(pos.noise_level))
        return original(self, pos)

    monkeypatch.setattr(RoPEAxial, 'dype_kappa', spy)
    out = model.sample([0, 1], size=32, steps=4, sampler='euler' if objective == 'flow' else 'ddim')
    assert out.shape == (2, 3, 32, 32) and torch.isfinite(out).all()
    levels = sorted(set(seen), reverse=True)
    assert levels[0] == pytest.approx(1.0) and all(0.0 <= t <= 1.0 for t in levels) and len(levels) == 4
    if objective == 'flow':
        assert levels == pytest.approx([1.0, 0.75, 0.5, 0.25])


def test_a_compiled_dit_follows_the_time_without_recompiling() -> None:
    import torch._dynamo as dynamo
    from test_compile import GraphCheck

    model = tiny_dit().eval()
    for enc in model.modules():
        if isinstance(enc, RoPEAxial):
            enc.strategy = 'dype_yarn'
    dynamo.reset()
    check = GraphCheck()
    compiled = torch.compile(model, backend=check)
    x, t, y = torch.randn(2, 3, 32, 32), torch.full((2,), 500.0), torch.tensor([0, 1])
    with torch.no_grad():
        for level in (1.0, 0.5, 0.1):
            eager = model(x, t, y, noise_level=torch.tensor(level))
            torch.testing.assert_close(compiled(x, t, y, noise_level=torch.tensor(level)), eager, atol=1e-4, rtol=1e-4)
    assert check.graphs == 1, f'{check.graphs} graphs for three diffusion times'


def test_the_generation_sweep_runs_dype_by_default_where_the_encoding_has_it() -> None:
    from vispe.sweeps.generation import generation_strategies

    assert generation_strategies(tiny_dit('rope_axial')) == [
        'none',
        'interpolate',
        'ntk',
        'yarn',
        'dype_ntk',
        'dype_yarn',
    ]
    assert not {'dype_ntk', 'dype_yarn'} & set(generation_strategies(tiny_dit('ape_sincos')))


@pytest.mark.parametrize('name', ['rope_axial', 'rope_mixed', 'harope'])
@pytest.mark.parametrize('strategy', ['dype_ntk', 'dype_yarn'])
def test_patch_logits_stay_relative_under_the_schedule(name: str, strategy: str) -> None:
    """Shifting every position leaves q_m . k_n as it was, at any diffusion time (the schedule changes frequencies,
    not positions)."""
    import vispe
    from vispe.positions import Positions

    torch.manual_seed(0)
    enc = vispe.build_encoding(dict(type=name, strategy=strategy), dim=64, num_heads=2, grid_size=TRAIN)
    q, k = torch.randn(2, 2, 96, 32), torch.randn(2, 2, 96, 32)
    grid = grid_positions(*TEST)
    for level in (1.0, 0.4):
        pos = Positions(grid.coords, grid=grid.grid, noise_level=torch.tensor(level))
        shifted = Positions(grid.coords + torch.tensor([3.0, -5.0]), grid=grid.grid, noise_level=torch.tensor(level))
        a, b = enc.rotate(q, k, pos), enc.rotate(q, k, shifted)
        torch.testing.assert_close(a[0] @ a[1].transpose(-1, -2), b[0] @ b[1].transpose(-1, -2), atol=1e-3, rtol=1e-4)
