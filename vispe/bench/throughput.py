"""Training throughput of the mmengine Runner against a plain PyTorch loop over the same model, data and optimizer:
what the Runner's hooks, message hub, logging and optimizer wrapper cost on top of the training step.

Each round trains both for ``warmup + iters`` iterations and times the last ``iters`` (images/s, data fetch included;
CUDA synchronised at the window's ends only), alternating which goes first; ``ratio = plain / runner`` of the medians.
The Runner runs as users run it, changed only where a measurement needs it (``prepare_config``); the plain loop is
``zero_grad``, forward, ``backward``, ``step``, with no scheduler, no logging and no ``.item()``.
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import mmengine
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, DefaultScope
from mmengine.runner import Runner, set_random_seed

from vispe.bench.timing import synchronize
from vispe.engine.config import compile_backbone, enable_amp, load_config, without_validation

LOOPS = ('runner', 'plain')


@dataclass
class LoopRun:
    """One loop's training in one round. ``initial`` / ``final``: the model's state dict before the first and after
    the last iteration (only with ``keep_state=True``)."""

    name: str
    iterations: int  # iterations trained in all, warm-up included
    images: int  # images in the timed iterations
    seconds: float  # wall time of the timed iterations
    iter_ms: list[float] = field(default_factory=list)
    initial: dict[str, torch.Tensor] | None = None
    final: dict[str, torch.Tensor] | None = None

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds


def default_device() -> str:
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _batch_len(data: Any) -> int:
    """Images in a batch as the dataloader yields it: a dict's 'inputs' (or first value), a sequence, a tensor."""
    if isinstance(data, dict):
        data = data['inputs'] if 'inputs' in data else next(iter(data.values()))
    if isinstance(data, torch.Tensor):
        return int(data.shape[0])
    return len(data)


def _timed_window(stamps: list[float], start: float, warmup: int) -> tuple[float, list[float]]:
    """(seconds, per-iteration ms) of the iterations after ``warmup``, from the end-of-iteration stamps."""
    edges = [start, *stamps][warmup:]
    return edges[-1] - edges[0], [(b - a) * 1e3 for a, b in zip(edges, edges[1:])]


# --- configuration ---------------------------------------------------------------------------------------------
def pin_schedule_ends(cfg: Config) -> None:
    """Give every scheduler without an ``end`` (one that follows the run's length) the length of the config's own
    run, so that the measured window, a short iteration loop, steps the first iterations of that run's schedule."""
    run = cfg.get('train_cfg') or {}
    schedulers = cfg.get('param_scheduler') or []
    for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
        length = run.get('max_epochs') if scheduler.get('by_epoch', True) else run.get('max_iters')
        if 'end' not in scheduler and length is not None:
            scheduler['end'] = length


def prepare_config(
    config: str,
    iters: int,
    warmup: int,
    cfg_options: dict | None = None,
    work_dir: str | None = None,
) -> Config:
    """The config both loops use: ``warmup + iters`` iterations of an IterBasedTrainLoop, an InfiniteSampler for a
    DefaultSampler (mmengine's loop sleeps 2 s when a finite one runs out), no validation or checkpoint, WARNING-level
    logs, a fixed seed; ``work_dir``: the parent of the rounds' work dirs (a temporary folder when None)."""
    if iters < 1 or warmup < 0:
        raise ValueError(f'iters must be >= 1 and warmup >= 0, got iters={iters} warmup={warmup}')
    cfg = load_config(config, cfg_options, work_dir=work_dir or tempfile.gettempdir())
    if work_dir is None:
        cfg.work_dir = None  # each round makes its own temporary folder
    total = warmup + iters
    without_validation(cfg)
    pin_schedule_ends(cfg)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=total, val_interval=total + 1)
    sampler = cfg.train_dataloader.get('sampler') or {}
    if sampler.get('type') == 'DefaultSampler':
        sampler = {k: v for k, v in sampler.items() if k != 'round_up'}
        cfg.train_dataloader.sampler = dict(sampler, type='InfiniteSampler')
    hooks = cfg.get('default_hooks') or {}
    if hooks.get('checkpoint'):
        hooks['checkpoint'].update(interval=-1, save_last=False)
        hooks['checkpoint'].pop('save_best', None)
    cfg.log_level = 'WARNING'
    cfg.log_processor = dict(cfg.get('log_processor') or {}, by_epoch=False)
    randomness = dict(cfg.get('randomness') or {})
    if randomness.get('seed') is None:
        randomness['seed'] = 0
    cfg.randomness = randomness
    return cfg


def batch_size_of(cfg: Config) -> int:
    return int(cfg.train_dataloader.batch_size)


# --- the two loops ---------------------------------------------------------------------------------------------
class _Stamps(Hook):
    """Runs last after every training iteration: the time stamps and batch sizes of the Runner's iterations."""

    priority = 'LOWEST'

    def __init__(self, device: str, warmup: int, total: int, keep_state: bool) -> None:
        self.device, self.warmup, self.total, self.keep_state = device, warmup, total, keep_state
        self.stamps: list[float] = []
        self.sizes: list[int] = []
        self.start = 0.0
        self.initial: dict[str, torch.Tensor] | None = None

    def before_train(self, runner) -> None:
        if self.keep_state:
            self.initial = _state(runner.model)
        synchronize(self.device)
        self.start = time.perf_counter()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        done = len(self.stamps) + 1
        if done in (self.warmup, self.total):
            synchronize(self.device)
        self.stamps.append(time.perf_counter())
        self.sizes.append(_batch_len(data_batch))


def _close_file_logs(runner: Runner) -> None:
    """Close the round's log file (the logger instance outlives the runner in mmengine's registry)."""
    for handler in list(runner.logger.handlers):
        if hasattr(handler, 'baseFilename'):
            handler.close()
            runner.logger.removeHandler(handler)


def run_runner(
    cfg: Config,
    warmup: int,
    iters: int,
    device: str | None = None,
    amp: bool = False,
    compile: bool = False,
    keep_state: bool = False,
) -> LoopRun:
    """Train a fresh Runner of ``cfg`` (from ``prepare_config``) and time its last ``iters`` iterations."""
    device = device or default_device()
    cfg = copy.deepcopy(cfg)
    if amp:
        enable_amp(cfg, device)
    cfg.experiment_name = f'throughput_{uuid.uuid4().hex[:12]}'
    with tempfile.TemporaryDirectory(prefix='vispe_throughput_') as tmp:
        cfg.work_dir = os.path.join(cfg.work_dir, cfg.experiment_name) if cfg.get('work_dir') else tmp
        runner = Runner.from_cfg(cfg)
        runner.model.to(device)  # the Runner picks cuda whenever it sees one; BaseModel.to moves the preprocessor
        if compile:
            compile_backbone(runner.model)
        hook = _Stamps(device, warmup, warmup + iters, keep_state)
        runner.register_hook(hook)
        try:
            runner.train()
        finally:
            _close_file_logs(runner)
    seconds, iter_ms = _timed_window(hook.stamps, hook.start, warmup)
    return LoopRun(
        'runner',
        iterations=runner.iter,
        images=sum(hook.sizes[warmup:]),
        seconds=seconds,
        iter_ms=iter_ms,
        initial=hook.initial,
        final=_state(runner.model) if keep_state else None,
    )


def _endless(dataloader: Iterable) -> Iterator:
    """The dataloader's batches without end, a finite sampler starting its next epoch (``set_epoch``) without mmengine's
    2 s pause; the first iterator is made now, as IterBasedTrainLoop does (it draws a seed from the global RNG)."""
    first = iter(dataloader)

    def batches() -> Iterator:
        iterator, epoch = first, 0
        while True:
            yield from iterator
            epoch += 1
            set_epoch = getattr(getattr(dataloader, 'sampler', None), 'set_epoch', None)
            if set_epoch is not None:
                set_epoch(epoch)
            iterator = iter(dataloader)

    return batches()


def run_plain_loop(
    cfg: Config,
    warmup: int,
    iters: int,
    device: str | None = None,
    amp: bool = False,
    compile: bool = False,
    keep_state: bool = False,
) -> LoopRun:
    """Train the config's model in a plain PyTorch loop and time its last ``iters`` iterations."""
    device = device or default_device()
    randomness = cfg.get('randomness') or {}
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        # the Runner's order, so that both start from the same weights: seed, build the model and move it to the
        # device (Runner.__init__); build the dataloader and its first iterator (the train loop), initialise the
        # weights and build the optimizer (Runner.train)
        seed = set_random_seed(randomness.get('seed'), randomness.get('deterministic', False))
        model = MODELS.build(copy.deepcopy(cfg.model)).to(device)
        dataloader = Runner.build_dataloader(
            copy.deepcopy(cfg.train_dataloader), seed=seed, diff_rank_seed=randomness.get('diff_rank_seed', False)
        )
        batches = _endless(dataloader)
        if hasattr(model, 'init_weights'):
            model.init_weights()
        optimizer = build_optim_wrapper(model, copy.deepcopy(cfg.optim_wrapper)).optimizer
    model.train()
    if compile:
        compile_backbone(model)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if amp else nullcontext()
    initial = _state(model) if keep_state else None
    total = warmup + iters
    stamps: list[float] = []
    sizes: list[int] = []
    synchronize(device)
    start = time.perf_counter()
    for done in range(1, total + 1):
        data = next(batches)
        optimizer.zero_grad()
        with autocast:
            loss, _ = model.parse_losses(model(**model.data_preprocessor(data, True), mode='loss'))  # the sum
        loss.backward()
        optimizer.step()
        if done in (warmup, total):
            synchronize(device)
        stamps.append(time.perf_counter())
        sizes.append(_batch_len(data))
    seconds, iter_ms = _timed_window(stamps, start, warmup)
    return LoopRun(
        'plain',
        iterations=total,
        images=sum(sizes[warmup:]),
        seconds=seconds,
        iter_ms=iter_ms,
        initial=initial,
        final=_state(model) if keep_state else None,
    )


# --- the comparison --------------------------------------------------------------------------------------------
def _summary(values: list[float]) -> dict[str, float]:
    return {'median': statistics.median(values), 'min': min(values), 'max': max(values)}


def runner_vs_loop(
    config: str,
    iters: int = 20,
    warmup: int = 5,
    rounds: int = 3,
    cfg_options: dict | None = None,
    amp: bool = False,
    compile: bool = False,
    device: str | None = None,
    work_dir: str | None = None,
    target: float | None = None,
) -> dict[str, Any]:
    """Train ``config`` through the Runner and through a plain loop, ``rounds`` times each, alternating which goes
    first; return the JSON-ready report (images/s per round and median for each, ``ratio`` = plain / runner
    medians, the caller's ``target`` for that ratio and whether it is ``met``: None without one)."""
    if rounds < 1:
        raise ValueError(f'rounds must be >= 1, got {rounds}')
    device = device or default_device()
    if device.startswith('cuda') and not torch.cuda.is_available():
        raise ValueError('device cuda asked for, but torch sees no CUDA device')
    cfg = prepare_config(config, iters, warmup, cfg_options, work_dir)
    runs: dict[str, list[LoopRun]] = {name: [] for name in LOOPS}
    load_before = os.getloadavg()[0]
    for r in range(rounds):
        for name in LOOPS if r % 2 == 0 else LOOPS[::-1]:
            run = run_runner if name == 'runner' else run_plain_loop
            runs[name].append(run(cfg, warmup, iters, device=device, amp=amp, compile=compile))
    loops: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        per_round = [x.images_per_s for x in rs]
        loops[name] = {
            'images_per_s': _summary(per_round),
            'rounds_images_per_s': per_round,
            'iterations': [x.iterations for x in rs],
            'iter_ms': [x.iter_ms for x in rs],
        }
    ratio = loops['plain']['images_per_s']['median'] / loops['runner']['images_per_s']['median']
    return {
        'config': config,
        'cfg_options': cfg_options or {},
        'batch_size': batch_size_of(cfg),
        'device': device,
        'threads': torch.get_num_threads(),
        'torch': torch.__version__,
        'mmengine': mmengine.__version__,
        'iters': iters,
        'warmup': warmup,
        'rounds': rounds,
        'amp': amp,
        'compile': compile,
        'cpu_count': os.cpu_count(),
        'load_avg_1m': [load_before, os.getloadavg()[0]],
        'loops': loops,
        'ratio': ratio,
        'target': target,
        'met': None if target is None else ratio <= target,
    }


__all__ = [
    'LOOPS',
    'LoopRun',
    'batch_size_of',
    'default_device',
    'prepare_config',
    'run_plain_loop',
    'run_runner',
    'runner_vs_loop',
]
