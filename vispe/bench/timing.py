"""How the benchmark measures a subject (one training step of one row): wall time over interleaved rounds (all warmed
up first; round-robin, the starting subject rotating, so drift falls on every row alike), then the peak memory of one
step and the SDPA kernel it ran (after timing, so the profiler never touches the times)."""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn


@dataclass
class Subject:
    """One row: a module in train mode, a closure running forward + backward on it, one clearing its grads."""

    name: str
    module: nn.Module
    forward_backward: Callable[[], None]
    zero_grad: Callable[[], None]

    def step(self) -> None:
        """One training step as timed: zero_grad, forward, backward."""
        self.zero_grad()
        self.forward_backward()


class Steppable(Protocol):
    """What ``interleaved_times`` times: a name and a step (a ``Subject``; fps's ``Timed``)."""

    name: str

    def step(self) -> object: ...


# --- compilation -----------------------------------------------------------------------------------------------
#: warm-up steps of a compiled subject, whatever ``warmup`` says (see ``benchmark.measure``)
COMPILE_WARMUP = 3


#: what ``--compile`` compiles: the whole model, or each of its transformer blocks (regional compilation)
COMPILE_SCOPES = ('model', 'blocks')


def compile_module(module: nn.Module, scope: str = 'model', backend: str | Callable[..., Any] = 'inductor') -> None:
    """``nn.Module.compile`` in place: the module, or with ``scope='blocks'`` each of its ``blocks`` (dynamo compiles
    the first and the others reuse its graph; patch embedding and head stay eager); without ``blocks``, the whole."""
    if scope not in COMPILE_SCOPES:
        raise ValueError(f'compile scope must be one of {COMPILE_SCOPES}, got {scope!r}')
    blocks = getattr(module, 'blocks', None)
    if scope == 'blocks' and isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks):
        for block in blocks:
            block.compile(backend=backend)
    else:
        module.compile(backend=backend)


def compile_subjects(subjects: Sequence[Subject], scope: str = 'model') -> None:
    """``compile_module`` every subject in place (compilation happens at its first step; see ``compile_limits``)."""
    for subject in subjects:
        compile_module(subject.module, scope)


def compile_limits(num_subjects: int) -> AbstractContextManager[None]:
    """A context for running compiled subjects (those of one class share their forward's code object): dynamo's
    recompile limits fit every row, hitting them raises rather than timing eager code, and exiting restores them."""
    import torch._dynamo

    config = torch._dynamo.config
    needed = 4 * num_subjects  # a few versions each (train mode, grad mode, shapes)
    return config.patch(
        recompile_limit=max(config.recompile_limit, needed),
        accumulated_recompile_limit=max(config.accumulated_recompile_limit, 8 * needed),
        fail_on_recompile_limit_hit=True,
    )


# --- time ------------------------------------------------------------------------------------------------------
def synchronize(device: str) -> None:
    """Wait for queued CUDA work (a no-op on CPU), so that a clock read after it counts that work."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def time_step(step: Callable[[], object], device: str) -> float:
    """Wall time of one step in ms (CUDA is synchronised on both sides, so queued work is counted)."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def interleaved_times(subjects: Sequence[Steppable], warmup: int, repeats: int, device: str) -> dict[str, list[float]]:
    """Warm every subject up, then time ``repeats`` rounds over all of them; ms per subject, in round order."""
    for _ in range(warmup):
        for subject in subjects:
            subject.step()
    synchronize(device)
    gc.collect()
    times: dict[str, list[float]] = {s.name: [] for s in subjects}
    for r in range(repeats):
        # rotate who goes first: a subject that always follows the same neighbour could inherit its cache state
        k = r % len(subjects)
        for subject in [*subjects[k:], *subjects[:k]]:
            times[subject.name].append(time_step(subject.step, device))
    return times


def paired_ratio(times: Sequence[float], base: Sequence[float]) -> float:
    """The median over rounds of times[r] / base[r], for two subjects timed in the same interleaved rounds: a drift of
    the machine's speed falls on both of a round's pair and cancels, where a ratio of the two medians keeps it."""
    return statistics.median(_per_round(times, base).tolist())  # the mean of the middle two for an even count


def _per_round(times: Sequence[float], base: Sequence[float]) -> torch.Tensor:
    """times[r] / base[r] per round, float64; both must have the same, non-zero number of rounds."""
    if len(times) != len(base) or not times:
        raise ValueError(f'a paired ratio needs the same number of rounds for both, got {len(times)} and {len(base)}')
    return torch.tensor(times, dtype=torch.float64) / torch.tensor(base, dtype=torch.float64)


def ratio_interval(
    times: Sequence[float], base: Sequence[float], level: float = 0.9, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A bootstrap interval of ``paired_ratio(times, base)``: rounds drawn with replacement, ``level`` of the
    resampled medians between the bounds; seeded, so a report is reproducible from its times."""
    per_round = _per_round(times, base)
    gen = torch.Generator().manual_seed(seed)
    rounds = torch.randint(len(per_round), (resamples, len(per_round)), generator=gen)
    ratios = torch.quantile(per_round[rounds], 0.5, dim=1)  # as statistics.median: not torch's lower middle
    tail = (1.0 - level) / 2
    lo, hi = torch.quantile(ratios, torch.tensor([tail, 1.0 - tail], dtype=torch.float64)).tolist()
    return lo, hi


# --- memory ----------------------------------------------------------------------------------------------------
MEMORY_METHODS = {
    'cuda': 'torch.cuda.max_memory_allocated during one step, minus what was allocated before it',
    'cpu': 'torch.profiler(profile_memory=True): max over time of the running sum of CPU allocator '
    'allocations and frees during one step',
}


@contextmanager
def profiled(**kwargs: Any) -> Iterator[Any]:
    """``torch.profiler.profile(activities=[CPU], **kwargs)`` with the native log lines of its start and stop kept off
    stderr; the step between them writes to stderr as usual."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], **kwargs)
    with _native_stderr_muted():
        prof.__enter__()
    try:
        yield prof
    finally:
        with _native_stderr_muted():
            prof.__exit__(None, None, None)


@contextmanager
def _native_stderr_muted() -> Iterator[None]:
    """File descriptor 2 pointed at the null device inside the block (what C++ libraries write to), then restored."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, 'w') as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak_bytes(step: Callable[[], None]) -> int:
    """Peak of the running sum of CPU allocations minus frees during ``step`` (0 = what was live before)."""
    from torch._C._profiler import _EventType  # allocation records; the public event list folds them into ops

    with profiled(profile_memory=True) as prof:
        step()
    sizes: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == 'cpu':
            sizes.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    running = itertools.accumulate(size for _, size in sorted(sizes))
    return max(running, default=0)


def peak_memory_mb(step: Callable[[], None], device: str) -> float:
    """Peak memory of one step above what was allocated before it, in MiB (see ``MEMORY_METHODS``)."""
    gc.collect()
    if device.startswith('cuda'):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    return _cpu_peak_bytes(step) / 2**20


# --- the SDPA kernel -------------------------------------------------------------------------------------------
#: the aten kernels behind ``F.scaled_dot_product_attention``, by the name the profiler records them under
SDPA_KERNELS = {
    'aten::_scaled_dot_product_flash_attention': 'flash',
    'aten::_scaled_dot_product_efficient_attention': 'efficient',
    'aten::_scaled_dot_product_cudnn_attention': 'cudnn',
    'aten::_scaled_dot_product_flash_attention_for_cpu': 'cpu-flash',
    'aten::_scaled_dot_product_fused_attention_overrideable': 'overrideable',
    'aten::_scaled_dot_product_attention_math': 'math',
}
#: what ``sdpa_backend`` says when no SDPA kernel ran (the attention weights were materialised, e.g. irpe on V)
NO_SDPA = 'none'


def sdpa_backend(step: Callable[[], None]) -> str:
    """The SDPA kernel(s) one ``step`` ran ('flash', 'efficient', 'cudnn', 'cpu-flash', 'math', joined by '+'
    when several), read from the profiler's record of aten ops; ``NO_SDPA`` when none ran."""
    with profiled() as prof:  # aten ops are recorded on the host for CUDA too
        step()
    synchronize('cuda' if torch.cuda.is_available() else 'cpu')
    kernels = {SDPA_KERNELS[e.name] for e in prof.events() if e.name in SDPA_KERNELS}
    return '+'.join(sorted(kernels)) or NO_SDPA


__all__ = [
    'COMPILE_SCOPES',
    'COMPILE_WARMUP',
    'MEMORY_METHODS',
    'NO_SDPA',
    'SDPA_KERNELS',
    'Steppable',
    'Subject',
    'compile_limits',
    'compile_module',
    'compile_subjects',
    'interleaved_times',
    'paired_ratio',
    'peak_memory_mb',
    'profiled',
    'sdpa_backend',
    'synchronize',
    'time_step',
]
