"""Speed and memory of positional encodings: one training step (forward + backward) per encoding.

``subjects`` builds one subject per row, ``timing`` measures them and ``reports`` prints and writes the report this
module assembles. ``measure_scaling`` repeats the benchmark at 224, 448 and 672 px: how each cost grows against the
baseline's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import timm
import torch

from vispe.bench.config import BenchmarkConfig, normalize_img_size
from vispe.bench.subjects import baseline_of, build_subjects, encoding_kind
from vispe.bench.timing import (
    COMPILE_WARMUP,
    MEMORY_METHODS,
    Subject,
    compile_limits,
    interleaved_times,
    peak_memory_mb,
    sdpa_backend,
)


def default_out_path(model: str, img_size: tuple[int, int], level: str, run: str | None = None) -> Path:
    """outputs/benchmark/<model>_<size>_<level>_<run>.json: size '224' or '224x320', ``run`` the ``settings_id`` (the
    name ends at the level without it), '/' in the model name ('DiT-S/2') replaced by '-'."""
    h, w = img_size
    name = model.replace('/', '-')
    tail = f'_{run}' if run else ''
    return Path('outputs') / 'benchmark' / f'{name}_{h if h == w else f"{h}x{w}"}_{level}{tail}.json'


def settings_id(cfg: BenchmarkConfig, **extra: Any) -> str:
    """A short hash of everything that makes a benchmark run's numbers (``cfg`` and ``extra``: the mode, the sizes
    of a scaling run, the threads): the run identity its report carries and its default file name ends with."""
    from vispe.evaluation.outputs import run_id

    return run_id({**asdict(cfg), **extra})


def summarize(
    times: dict[str, list[float]], peaks: dict[str, float], baseline: str, backends: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One result dict per row: median and min ms, median / baseline median, peak MiB, SDPA kernel, the raw times."""
    base = statistics.median(times[baseline])
    rows = []
    for name, ms in times.items():
        med = statistics.median(ms)
        rows.append(
            {
                'encoding': name,
                'median_ms': med,
                'min_ms': min(ms),
                'ratio': med / base,
                'peak_mb': peaks[name],
                'sdpa': (backends or {}).get(name, ''),
                'times_ms': ms,
            }
        )
    return rows


def measure(cfg: BenchmarkConfig, subjects: Sequence[Subject]) -> dict[str, Any]:
    """Time and measure already-built subjects; return the JSON-ready report."""
    with compile_limits(len(subjects)) if cfg.compile else contextlib.nullcontext():
        return _measure(cfg, subjects)


def _measure(cfg: BenchmarkConfig, subjects: Sequence[Subject]) -> dict[str, Any]:
    load_before = os.getloadavg()[0]  # recorded so that a noisy run can be recognised afterwards
    # compiled modules compile on the first call and recompile once more when a grid-table cache turns from empty to
    # filled (dynamo guards on it): at least three warm-up steps keep compilation out of the timed ones
    warmup = max(cfg.warmup, COMPILE_WARMUP) if cfg.compile else cfg.warmup
    times = interleaved_times(subjects, warmup, cfg.repeats, cfg.device)
    # memory after timing: the profiler's overhead must not touch the times
    peaks, backends = {}, {}
    for s in subjects:
        s.zero_grad()  # grads start absent, as in a timed step: the peak then includes allocating them
        peaks[s.name] = peak_memory_mb(s.forward_backward, cfg.device)
        backends[s.name] = sdpa_backend(s.step)
    return {
        'model': cfg.model,
        'img_size': list(cfg.img_size),
        'batch_size': cfg.batch_size,
        'level': cfg.level,
        'device': cfg.device,
        'threads': torch.get_num_threads(),
        'torch': torch.__version__,
        'timm': timm.__version__,
        'repeats': cfg.repeats,
        'warmup': warmup,
        'seed': cfg.seed,
        'amp': cfg.amp,
        'compile': cfg.compile,
        'compile_scope': cfg.compile_scope,
        'attention_kernel': cfg.attention_kernel,
        'baseline': baseline_of(cfg),
        'model_kwargs': cfg.model_kwargs,
        'cpu_count': os.cpu_count(),
        'load_avg_1m': [load_before, os.getloadavg()[0]],
        'memory_method': MEMORY_METHODS['cuda' if cfg.device.startswith('cuda') else 'cpu'],
        'results': summarize(times, peaks, baseline_of(cfg), backends),
    }


def run_benchmark(cfg: BenchmarkConfig) -> dict[str, Any]:
    """Build every subject, then measure them: the whole benchmark as one call."""
    return measure(cfg, build_subjects(cfg))


# --- scaling with resolution ----------------------------------------------------------------------------------
#: image sizes of ``--scaling``: 1x, 2x and 3x ViT's 224 (196, 784 and 1764 patches at patch 16)
SCALING_SIZES = (224, 448, 672)


def measure_scaling(cfg: BenchmarkConfig, sizes: Sequence[int] = SCALING_SIZES) -> dict[str, Any]:
    """The benchmark at each square size (each size's subjects freed before the next): per encoding its ratio to the
    baseline at every size and its growth from first to last size over the baseline's (1.0: grows alike)."""
    reports = []
    for size in sizes:
        sized = replace(cfg, img_size=normalize_img_size(size))
        subjects = build_subjects(sized)
        reports.append(measure(sized, subjects))
        del subjects
        gc.collect()
        if cfg.device.startswith('cuda'):
            torch.cuda.empty_cache()
    return {'sizes': list(sizes), 'baseline': baseline_of(cfg), 'reports': reports, 'scaling': scaling_rows(reports)}


def scaling_rows(reports: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per encoding: kind, median ms, ratio and peak MB per size, growth relative to the baseline's."""
    by_size = [{r['encoding']: r for r in report['results']} for report in reports]
    base = reports[0]['baseline']
    rows = []
    for name in by_size[0]:
        first, last = by_size[0][name], by_size[-1][name]
        growth = last['median_ms'] / first['median_ms']
        base_growth = by_size[-1][base]['median_ms'] / by_size[0][base]['median_ms']
        rows.append(
            {
                'encoding': name,
                'kind': encoding_kind(name),
                'median_ms': [rows_[name]['median_ms'] for rows_ in by_size],
                'ratio': [rows_[name]['ratio'] for rows_ in by_size],
                'peak_mb': [rows_[name]['peak_mb'] for rows_ in by_size],
                'growth_vs_baseline': growth / base_growth,
            }
        )
    return rows


__all__ = [
    'SCALING_SIZES',
    'BenchmarkConfig',
    'default_out_path',
    'settings_id',
    'measure',
    'measure_scaling',
    'normalize_img_size',
    'run_benchmark',
    'scaling_rows',
    'summarize',
]
