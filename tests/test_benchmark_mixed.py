"""The mixed-size cost benchmark (tools/benchmark.py --mixed-sizes): the batches it builds are what it says they
are, and its report carries the ratios and targets (the timings themselves are the tool's to print, not a test's)."""

import math

import pytest
import torch

from vispe.bench.measure import BenchmarkConfig
from vispe.bench.mixed import (
    flexi_grids,
    mixed_markdown,
    native_grids,
    packed_rows,
    run_mixed_benchmark,
)
from vispe.layout import make_layout
from workbench.targets import MIXED_GPU_TARGETS as GPU_TARGETS
from workbench.targets import MIXED_TARGETS as TARGETS


def test_native_grids_keep_the_token_budget_at_wide_and_tall_ratios():
    grids = native_grids((8, 8), 200, torch.Generator().manual_seed(0))
    assert all(h * w <= 64 for h, w in grids)
    ratios = [w / h for h, w in grids]
    assert min(ratios) < 0.5 and max(ratios) > 2 and all(1 / 4 <= r <= 4 for r in ratios)
    assert sum(h * w for h, w in grids) / len(grids) > 56  # the largest grid of each ratio: near the budget


@pytest.mark.parametrize('prefix', [0, 1, 2])
def test_flexi_grids_add_up_and_packed_rows_fill_the_fixed_batch_tensor(prefix):
    gen = torch.Generator().manual_seed(0)
    grids = flexi_grids((8, 8), 2 * 32 * 64, gen)
    assert all(h == w and 1 <= h <= 8 for h, w in grids)
    assert 2 * 32 * 64 - 64 < sum(h * w for h, w in grids) <= 2 * 32 * 64
    kept = packed_rows(grids, 64, 32, prefix)
    layout = make_layout(kept, prefix, 'pack', 64)
    assert layout.num_rows == 32 and layout.length == prefix + 64  # the fixed batch's 32 x (P + 64) tokens
    assert (8, 8) in kept and layout.slots_per_row > 1  # full-grid images and rows of several, in one layout
    assert sum(prefix + h * w for h, w in kept) > 0.95 * 32 * (prefix + 64)  # the fullest rows: little padding
    assert all(g in grids for g in kept)


def test_the_report_has_every_batch_with_its_ratio_and_target():
    cfg = BenchmarkConfig(
        model='vit_tiny_patch16_224',
        img_size=(16, 16),
        batch_size=4,
        warmup=0,
        repeats=1,
        model_kwargs=dict(patch_size=4, embed_dim=32, depth=1, num_heads=2, num_classes=3),
    )
    report = run_mixed_benchmark(cfg, ['rope_mixed'], TARGETS)
    rows = {r['batch']: r for r in report['results']}
    assert set(rows) == {'fixed', 'padded', 'packed', 'padded (flexi)'}
    assert rows['fixed']['ratio'] == 1.0 and rows['fixed']['slots'] == 4 * (1 + 16)  # cls + 4 x 4 patches per row
    assert rows['packed']['slots'] == rows['fixed']['slots'] and rows['packed']['images'] > 4
    assert rows['padded (flexi)']['slots'] > rows['packed']['slots']  # what packing saves
    for name, target in TARGETS.items():
        assert rows[name]['target'] == target and rows[name]['meets_target'] == (rows[name]['ratio'] <= target)
        assert math.isfinite(rows[name]['per_real_token'])
        lo, hi = rows[name]['ratio_interval']
        assert lo == hi == pytest.approx(rows[name]['ratio'])  # one round: nothing to resample
        assert rows[name]['verdict'] == ('met' if hi <= target else 'missed')
    assert report['targets'] == TARGETS and GPU_TARGETS['padded'] < TARGETS['padded']  # CPU: issue 18's
    assert '90% interval' in mixed_markdown(report).splitlines()[0]
    table = mixed_markdown(report)
    assert table.count('\n') == 1 + len(rows) and '| rope_mixed | packed |' in table


def test_the_ratio_interval_follows_the_noise_and_the_verdict_needs_all_of_it():
    from vispe.bench.mixed import verdict
    from vispe.bench.timing import paired_ratio, ratio_interval

    gen = torch.Generator().manual_seed(0)
    base = (100 + 15 * torch.randn(30, generator=gen)).tolist()
    quiet = ratio_interval([1.02 * b for b in base], base)  # every round 2% slower: the drift cancels, pairwise
    assert quiet == pytest.approx((1.02, 1.02))
    noisy_times = (102 + 15 * torch.randn(30, generator=gen)).tolist()
    lo, hi = ratio_interval(noisy_times, base)
    assert lo < 1.02 < hi and hi - lo > 0.05 and lo <= paired_ratio(noisy_times, base) <= hi
    assert ratio_interval(noisy_times, base) == (lo, hi)  # seeded: a report can be checked from its times
    assert verdict((0.98, 1.04), 1.05) == 'met'
    assert verdict((1.06, 1.10), 1.05) == 'missed'
    assert verdict((1.00, 1.09), 1.05) == 'undecided'
    with pytest.raises(ValueError, match='same number of rounds'):
        ratio_interval([1.0, 2.0], [1.0])


def test_the_paired_ratio_cancels_the_machines_drift():
    """Each round's speed drifts by up to 25% (as on a shared virtual machine), the same for both subjects of the
    round, and each step has 1% noise of its own. Over 100 such benchmarks, the median of the per-round ratios finds
    the true 1.03 about three times closer than the ratio of the two medians, which pairs different rounds."""
    from vispe.bench.timing import paired_ratio, ratio_interval

    gen = torch.Generator().manual_seed(0)
    paired_errors, median_errors, covered = [], [], 0
    for _ in range(100):
        drift = 100 * (0.75 + 0.5 * torch.rand(30, generator=gen))
        base = (drift * (1 + 0.01 * torch.randn(30, generator=gen))).tolist()
        times = (1.03 * drift * (1 + 0.01 * torch.randn(30, generator=gen))).tolist()
        paired_errors.append(paired_ratio(times, base) - 1.03)
        median_errors.append(sorted(times)[15] / sorted(base)[15] - 1.03)
        lo, hi = ratio_interval(times, base, resamples=200)
        covered += lo <= 1.03 <= hi
    rms = [torch.tensor(e).square().mean().sqrt().item() for e in (paired_errors, median_errors)]
    assert rms[0] < 0.006 and rms[0] < 0.5 * rms[1]
    assert covered >= 80  # a 90% interval holds the truth about 90 times in 100
    with pytest.raises(ValueError, match='same number of rounds'):
        paired_ratio([1.0], [])
