"""The prepared GPU check (``tools/gpu_check.sh``): every step in one process, under a time budget, into one summary.

Steps, cheap and most telling first (``STEPS``): the GPU-marked tests (``pytest -m gpu``, in a subprocess whose
failure stops nothing); the model-level benchmark of every image encoding at the two settings, eager (ViT-S/16
224 px batch 64, with timm's own models beside vispe's, and ViT-B/16 448 px batch 16); the attention cores against
SDPA and against SDPA with a learned bias; mixed-size batches against a fixed one; the Runner against a plain loop;
then the compiled benchmarks, which take most of the time (a ViT's compilation is tens of seconds). Compiled rows
are built and compiled one at a time, most important first (``compile_order``: ape_learned, then each target's
encoding with the timm pair it belongs to); a row whose compilation would overrun the budget, judged by the rows
compiled before it, is skipped, and the summary names it. Any step that would overrun is skipped the same way.

Everything is bf16 autocast, forward + backward, as ``tools/benchmark.py --amp [--compile]`` measures it
(``vispe.bench.measure``); every report is also written as that tool's JSON. Nothing is downloaded (models
are randomly initialised) and open3d is not needed. ``plan_for('cpu')`` runs the same steps at toy sizes: the
check of the script, not of its figures.
"""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from vispe.bench.measure import BenchmarkConfig, measure
from vispe.bench.reports import write_report
from vispe.bench.rows import SDPA_BIAS
from vispe.bench.subjects import SDPA, build_subjects
from vispe.bench.timing import COMPILE_WARMUP, Subject, compile_limits, compile_module, synchronize
from vispe.evaluation.outputs import check_target, write_text
from workbench.gpu_plan import (
    BASELINE,
    TARGET_ORDER,
    TIMM_PAIRS,
    Plan,
    Setting,
    compile_order,
    plan_for,
)
from workbench.targets import THROUGHPUT_TARGET, mixed_targets_for


# --- running under a budget ------------------------------------------------------------------------------------
@dataclass
class StepResult:
    """What became of one step: 'done', 'skipped' (with why) or 'failed' (with the error's last line)."""

    key: str
    title: str
    status: str
    seconds: float = 0.0
    report: dict[str, Any] | None = None
    note: str = ''


@dataclass
class Clock:
    """The budget: seconds since ``start`` (time.monotonic) against ``budget_s``."""

    budget_s: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def used(self) -> float:
        return time.monotonic() - self.start


def log(clock: Clock, text: str) -> None:
    print(f'[gpu_check {clock.used():.0f}s] {text}', flush=True)


def free_memory(device: str) -> None:
    """Release what a finished step held, so the next one starts from the same empty device."""
    gc.collect()
    if device == 'cuda':
        torch.cuda.empty_cache()


def run_tests(plan: Plan, out: Path, clock: Clock) -> dict[str, Any]:
    """``pytest -m gpu`` in a subprocess (its output in OUT/tests.txt), stopped after ``tests_cap_s``."""
    if importlib.util.find_spec('pytest') is None:  # a GPU machine's own python may lack it; the benchmarks go on
        raise RuntimeError(f'pytest is not installed for {sys.executable}: the GPU-marked tests did not run')
    cap = max(1.0, min(plan.tests_cap_s, clock.left()))
    argv = [sys.executable, '-m', 'pytest', '-q', '-m', 'gpu', '-p', 'no:cacheprovider', *plan.tests]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=cap)
        text, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        text = (err.stdout or b'').decode() if isinstance(err.stdout, bytes) else (err.stdout or '')
        text, code = text + f'\nstopped after {cap:.0f} s (the tests cap)\n', -1
    write_text(out / 'tests.txt', text, KIND)
    lines = [line for line in text.splitlines() if line.strip()]
    return {'exit': code, 'summary': lines[-1].strip('= ') if lines else '(no output)', 'argv': argv[1:]}


def benchmark(cfg: BenchmarkConfig) -> dict[str, Any]:
    """Build every row of ``cfg``, measure them, free them."""
    subjects = build_subjects(cfg)
    try:
        return measure(cfg, subjects)
    finally:
        del subjects
        free_memory(cfg.device)


def compiled_benchmark(plan: Plan, setting: Setting, clock: Clock) -> tuple[dict[str, Any] | None, str]:
    """The compiled rows of ``setting`` (``compile_order``) that fit the budget, each built, compiled and warmed up
    on its own, then measured together. Returns the report (None when fewer than the baseline and one more row
    fit) and a note naming the rows left out, or that failed to compile."""
    rows = compile_order(plan, setting)
    cfg = setting.config(plan.device, encodings=rows, compile=True)
    kept: list[Subject] = []
    compile_times: list[float] = []
    failed: dict[str, str] = {}
    try:
        with compile_limits(len(rows)):
            for row in rows:
                guess = sum(compile_times) / len(compile_times) if compile_times else plan.compile_s
                if guess + plan.row_s * (len(kept) + 1) > clock.left():
                    break
                start = time.monotonic()
                try:
                    kept.append(compiled_subject(cfg, row, plan.compile_backend, plan.compile_scope))
                except Exception as err:  # one row that does not compile leaves the others their figures
                    failed[row] = error_line(err)
                compile_times.append(time.monotonic() - start)
            note = compiled_note([r for r in rows if r not in failed and r not in {s.name for s in kept}], failed)
            if len(kept) < 2 or kept[0].name != BASELINE:
                return None, note or 'only the baseline compiled'
            report = measure(replace(cfg, encodings=[s.name for s in kept]), kept)
    finally:
        kept.clear()
        torch._dynamo.reset()  # the next compiled step starts from nothing, as its own process would
        free_memory(plan.device)
    report['compile_backend'] = plan.compile_backend
    report['compile_scope'] = plan.compile_scope
    report['compile_s'] = compile_times
    return report, note


def compiled_note(left_out: Sequence[str], failed: dict[str, str]) -> str:
    """What the summary says of a compiled step's missing rows."""
    parts = [f'rows left out for lack of time: {", ".join(left_out)}'] if left_out else []
    parts += [f'{row} failed to compile ({line})' for row, line in failed.items()]
    return '; '.join(parts)


def error_line(err: BaseException) -> str:
    """'TypeName: first line of the message', for a summary."""
    return f'{type(err).__name__}: {err}'.splitlines()[0]


def compiled_subject(cfg: BenchmarkConfig, row: str, backend: str, scope: str = 'blocks') -> Subject:
    """One row built, compiled with ``backend`` over ``scope`` (``compile_module``) and warmed up (compilation
    happens then, outside timed rounds)."""
    (subject,) = build_subjects(replace(cfg, encodings=[row], baseline=row, compile=False))
    compile_module(subject.module, scope, backend)
    for _ in range(COMPILE_WARMUP):
        subject.step()
    synchronize(cfg.device)
    return subject


def throughput(plan: Plan, out: Path) -> dict[str, Any]:
    from vispe.bench.throughput import runner_vs_loop

    return runner_vs_loop(
        plan.throughput_config,
        iters=plan.throughput_iters,
        warmup=3,
        rounds=plan.throughput_rounds,
        amp=True,
        device=plan.device,
        work_dir=str(out / 'throughput_work'),
        target=THROUGHPUT_TARGET,
    )


Step = tuple[str, str, Callable[[], Any]]


def steps(plan: Plan, out: Path, clock: Clock) -> list[Step]:
    """(key, title, run) per step, in the order they run (module docstring). ``run`` returns a report, or a
    compiled step's (report or None, note)."""
    from vispe.bench.mixed import run_mixed_benchmark

    s, b, device = plan.small, plan.large, plan.device
    pair_rows = [row for timm_row, vispe_row, _ in plan.pairs for row in (timm_row, vispe_row)]

    def attention(setting: Setting) -> dict[str, Any]:
        rows = [*plan.encodings, SDPA_BIAS]
        return benchmark(setting.config(device, encodings=rows, baseline=SDPA, level='attention'))

    def cores(setting: Setting | None, kernel: str) -> dict[str, Any] | tuple[None, str]:
        """The bias encodings' attention cores on one kernel (with the learned-bias floor on SDPA)."""
        if setting is None:
            return None, 'no setting for it in this plan'
        if kernel == 'flex' and device != 'cuda':
            return None, 'FlexAttention has no backward on CPU'
        rows = [*plan.flex_rows, SDPA_BIAS] if kernel == 'sdpa' else list(plan.flex_rows)
        cfg = setting.config(device, encodings=rows, baseline=SDPA, level='attention', attention_kernel=kernel)
        return benchmark(cfg)

    h = plan.huge.label if plan.huge is not None else '-'
    v = plan.video.label if plan.video is not None else '-'

    def video() -> dict[str, Any] | tuple[None, str]:
        if plan.video is None:
            return None, 'no setting for it in this plan'
        return benchmark(plan.video.config(device, encodings=list(plan.video_encodings)))

    return [
        ('tests', 'GPU-marked tests (pytest -m gpu)', lambda: run_tests(plan, out, clock)),
        (
            'eager_small',
            f'eager, {s.label}',
            lambda: benchmark(s.config(device, encodings=[*plan.encodings, *pair_rows])),
        ),
        ('eager_large', f'eager, {b.label}', lambda: benchmark(b.config(device, encodings=plan.encodings))),
        ('attention_small', f'attention cores, {s.label}', lambda: attention(s)),
        (
            'mixed',
            f'mixed-size batches, {s.label}',
            lambda: run_mixed_benchmark(s.config(device), plan.mixed_encodings, mixed_targets_for(device)),
        ),
        ('video', f'eager, {v}', video),
        ('throughput', 'Runner against a plain loop', lambda: throughput(plan, out)),
        ('attention_large', f'attention cores, {b.label}', lambda: attention(b)),
        ('attention_huge', f'attention cores, {h}, SDPA', lambda: cores(plan.huge, 'sdpa')),
        ('attention_huge_flex', f'attention cores, {h}, FlexAttention', lambda: cores(plan.huge, 'flex')),
        ('compiled_small', f'compiled, {s.label}', lambda: compiled_benchmark(plan, s, clock)),
        ('compiled_large', f'compiled, {b.label}', lambda: compiled_benchmark(plan, b, clock)),
        # where FlexAttention starts to win below 4097 tokens: last, as what the budget leaves allows
        ('attention_small_flex', f'attention cores, {s.label}, FlexAttention', lambda: cores(s, 'flex')),
        ('attention_large_flex', f'attention cores, {b.label}, FlexAttention', lambda: cores(b, 'flex')),
    ]


#: the gpu check owns its OUT folder: any earlier gpu check's reports there are replaced (vispe.evaluation.outputs)
KIND = 'gpu_check'


def check_outputs(out: Path, keys: Sequence[str]) -> None:
    """OutputConflict, before anything runs, when OUT holds a file the check would write over and did not write
    (summary.md, tests.txt, <step>.json); the tool's --force lets it replace those (never a file of another format).
    """
    for name in ['summary.md', 'tests.txt', *(f'{key}.json' for key in keys)]:
        check_target(out / name, KIND)


def run_gpu_check(plan: Plan, out: str | Path, budget_s: float, clock: Clock | None = None) -> list[StepResult]:
    """Run the plan's steps under ``budget_s`` seconds, writing each report as OUT/<step>.json; the results in
    order. A step expected to overrun is skipped (the compiled ones trim their rows themselves); one that raises
    is recorded as failed, and the next one runs."""
    out = Path(out)
    clock = clock or Clock(budget_s)
    results: list[StepResult] = []
    todo = steps(plan, out, clock)
    check_outputs(out, [key for key, _, _ in todo])
    out.mkdir(parents=True, exist_ok=True)
    for i, (key, title, run) in enumerate(todo, 1):
        estimate = plan.estimates.get(key, 0.0)
        if estimate > clock.left():
            note = f'needs about {estimate:.0f} s, {max(clock.left(), 0):.0f} s were left'
            results.append(StepResult(key, title, 'skipped', note=note))
            continue
        log(clock, f'{i}/{len(todo)} {title}')
        results.append(_run_step(key, title, run, out))
        log(clock, f'{key}: {results[-1].status} in {results[-1].seconds:.0f} s {results[-1].note}'.rstrip())
    log(clock, f'done in {clock.used():.0f} s (budget {budget_s:.0f} s); reports in {out}')
    return results


def _run_step(key: str, title: str, run: Callable[[], Any], out: Path) -> StepResult:
    start = time.monotonic()
    try:
        value = run()
    except Exception as err:  # one step's failure is reported, and the others still run
        traceback.print_exc()
        return StepResult(key, title, 'failed', time.monotonic() - start, note=error_line(err))
    seconds = time.monotonic() - start
    report, note = value if isinstance(value, tuple) else (value, '')
    if report is None:
        return StepResult(key, title, 'skipped', seconds, note=note or 'nothing fitted the budget')
    write_report(report, out / f'{key}.json', kind=KIND)
    return StepResult(key, title, 'done', seconds, report, note)


__all__ = [
    'BASELINE',
    'TARGET_ORDER',
    'TIMM_PAIRS',
    'Clock',
    'Plan',
    'Setting',
    'StepResult',
    'compile_order',
    'compiled_benchmark',
    'plan_for',
    'run_gpu_check',
]
