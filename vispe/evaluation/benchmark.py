"""Speed and memory of positional encodings: one training step (forward + backward) per encoding.

Two levels:

* ``model``: the whole model on random images: a timm ViT name with cross-entropy on random labels, or a DiT name
  (``DiT-S/2``, ``DiT-Ti/4``, ...: ``vispe.backbones.dit.dit``) with the diffusion MSE on random times and labels.
* ``attention``: one vispe ``Attention`` layer of the model's width and heads on (B, N, D) random tokens of
  the grid the image size gives, holding the model's own first-layer encoding instance; plus an ``sdpa`` row
  (the same layer with no encoding). A model-level encoding (embed / after_block hooks, e.g. ``ape_learned``)
  is timed as its hook on the tokens followed by that plain layer, so it reads as "sdpa + the hook" (in the
  model the hook runs once per forward, not once per layer).

Every subject is built first, in one process, from the same seed; all are warmed up; the repeats are then
interleaved (round-robin, the starting subject rotating each round) so that drift from other processes, clock
changes or heat falls on every encoding alike. Medians are reported, with min and a ratio to the baseline.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from torch import nn

from vispe.backbones.dit import dit
from vispe.backbones.vit import create_model
from vispe.encodings import encoding_class, list_encodings
from vispe.positions import Positions, grid_positions

LEVELS = ('model', 'attention')
#: name of the attention-level row without any encoding
SDPA = 'sdpa'
#: the ratio denominator when none is given: each backbone family's default encoding
DEFAULT_BASELINE = {'vit': 'ape_learned', 'dit': 'ape_sincos'}

MEMORY_METHODS = {
    'cuda': 'torch.cuda.max_memory_allocated during one step, minus what was allocated before it',
    'cpu': 'torch.profiler(profile_memory=True): max over time of the running sum of CPU allocator '
    'allocations and frees during one step',
}


@dataclass
class BenchmarkConfig:
    """What to measure. ``encodings=None`` means every image (2D) encoding; 'a+b' names a combination and
    'name:key=value,...' sets an encoding's arguments (``parse_encoding_spec``)."""

    model: str = 'vit_small_patch16_224'
    img_size: tuple[int, int] = (224, 224)
    batch_size: int = 8
    encodings: Sequence[str] | None = None
    baseline: str | None = None  # None: each backbone's own default (DEFAULT_BASELINE)
    level: str = 'model'
    warmup: int = 3
    repeats: int = 10
    device: str = 'cpu'
    seed: int = 0
    model_kwargs: dict[str, Any] = field(default_factory=dict)


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


def is_dit(model: str) -> bool:
    """'DiT-S/2' style names are vispe DiTs; anything else is a timm ViT name."""
    return model.startswith('DiT-')


def baseline_of(cfg: BenchmarkConfig) -> str:
    return cfg.baseline or DEFAULT_BASELINE['dit' if is_dit(cfg.model) else 'vit']


# --- what to build ---------------------------------------------------------------------------------------------


def normalize_img_size(size: int | Sequence[int]) -> tuple[int, int]:
    """224 or [224] -> (224, 224); (H, W) stays."""
    if isinstance(size, int):
        return size, size
    size = [int(s) for s in size]
    if len(size) not in (1, 2):
        raise ValueError(f'image size is one int or two (H W), got {size}')
    return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])


def resolve_encodings(encodings: Sequence[str] | None, baseline: str, level: str = 'model') -> list[str]:
    """Row names: the baseline first, then the rest in the given order, duplicates dropped, each validated.

    An unknown name raises vispe's ValueError (it lists the closest registered names).
    """
    names = list(dict.fromkeys([baseline, *(list_encodings(ndim=2) if encodings is None else encodings)]))
    for name in names:
        if not (level == 'attention' and name == SDPA):
            for part in parse_encoding_spec(name):
                encoding_class(part if isinstance(part, str) else part['type'])
    return names


def _parse_value(text: str) -> Any:
    """'3' -> 3, '0.5' -> 0.5, 'true' / 'false' -> bool, 'none' -> None, anything else stays a string."""
    lowered = text.lower()
    if lowered in ('true', 'false'):
        return lowered == 'true'
    if lowered == 'none':
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_encoding_spec(spec: str) -> list[str | dict[str, Any]]:
    """A row spec -> vispe encoding specs: 'a+b' combines; 'name:key=value,key=value' sets arguments.

    'irpe:mode=contextual,on=qkv+ape_learned' -> [{'type': 'irpe', 'mode': 'contextual', 'on': 'qkv'},
    'ape_learned']. Values that look like an int, float, bool (true / false) or none are parsed as such.
    """
    parts: list[str | dict[str, Any]] = []
    for part in spec.split('+'):
        name, sep, args = part.partition(':')
        if not sep:
            parts.append(name)
            continue
        cfg: dict[str, Any] = {'type': name}
        for item in args.split(','):
            key, eq, value = item.partition('=')
            if not eq or not key.strip():
                raise ValueError(f'encoding spec {spec!r}: expected name:key=value,key=value, got {item!r}')
            cfg[key.strip()] = _parse_value(value.strip())
        parts.append(cfg)
    return parts


def default_out_path(model: str, img_size: tuple[int, int], level: str) -> Path:
    """outputs/benchmark/<model>_<size>_<level>.json, size '224' when square else '224x320'; a '/' in the model
    name ('DiT-S/2') becomes '-', so the report stays in outputs/benchmark/."""
    h, w = img_size
    name = model.replace('/', '-')
    return Path('outputs') / 'benchmark' / f'{name}_{h if h == w else f"{h}x{w}"}_{level}.json'


def _build(cfg: BenchmarkConfig, name: str | None) -> nn.Module:
    """The model with encoding ``name`` (a row spec, see ``parse_encoding_spec``; None for none), seeded so
    shared weights agree."""
    torch.manual_seed(cfg.seed)
    spec = None if name is None else parse_encoding_spec(name)
    if is_dit(cfg.model):
        model = dit(cfg.model, encoding=spec, img_size=cfg.img_size, **cfg.model_kwargs)
    else:
        model = create_model(cfg.model, encoding=spec, img_size=cfg.img_size, **cfg.model_kwargs)
    model._check_size(*cfg.img_size)  # a clear ValueError now rather than in the first step
    return model.to(cfg.device).train()


def _dit_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    """A DiT training step: MSE of the prediction on noisy random images at random times and labels."""
    model = _build(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    B = cfg.batch_size
    x = torch.randn(B, model.in_chans, *cfg.img_size, generator=gen).to(cfg.device)
    t = (torch.rand(B, generator=gen) * 1000).to(cfg.device)
    y = torch.randint(model.num_classes, (B,), generator=gen).to(cfg.device)
    target = torch.randn(B, model.out_chans, *cfg.img_size, generator=gen).to(cfg.device)

    def forward_backward() -> None:
        F.mse_loss(model(x, t, y), target).backward()

    return Subject(name, model, forward_backward, lambda: model.zero_grad(set_to_none=True))


def _model_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    if is_dit(cfg.model):
        return _dit_subject(cfg, name)
    model = _build(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    images = torch.randn(cfg.batch_size, model.patch_embed.proj.in_channels, *cfg.img_size, generator=gen)
    images = images.to(cfg.device)
    labels = torch.randint(max(model.num_classes, 1), (cfg.batch_size,), generator=gen).to(cfg.device)

    def forward_backward() -> None:
        out = model(images)
        # a headless model (num_classes=0) has no logits to classify: any scalar of its output will do
        loss = F.cross_entropy(out, labels) if model.num_classes else out.square().mean()
        loss.backward()

    return Subject(name, model, forward_backward, lambda: model.zero_grad(set_to_none=True))


class EncodedAttention(nn.Module):
    """One attention layer plus the model-level encodings' hooks around it (attention-level rows)."""

    def __init__(self, attn: nn.Module, model_level: nn.ModuleDict, num_prefix: int) -> None:
        super().__init__()
        self.attn, self.pe, self.num_prefix = attn, model_level, num_prefix

    def forward(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        embed = [enc for enc in self.pe.values() if 'embed' in enc.hooks()]
        if embed:
            prefix, patches = x[:, : self.num_prefix], x[:, self.num_prefix :]
            for enc in embed:
                patches = enc.embed(patches, pos)
            x = torch.cat([prefix, patches], dim=1)
        x = self.attn(x, pos)
        for enc in self.pe.values():
            if 'after_block' in enc.hooks():
                x = enc.after_block(x, pos)
        return x


def _attention_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    model = _build(cfg, None if name == SDPA else name)
    num_prefix = getattr(model, 'num_prefix_tokens', 0)  # a DiT has none
    layer = EncodedAttention(model.blocks[0].attn, model.pe, num_prefix)
    patch_embed = model.x_embedder if is_dit(cfg.model) else model.patch_embed
    (ph, pw), (h, w) = patch_embed.patch_size, cfg.img_size
    pos = grid_positions(h // ph, w // pw, num_prefix, torch.device(cfg.device))
    n_tokens = num_prefix + pos.num_tokens
    gen = torch.Generator().manual_seed(cfg.seed)
    # requires_grad: inside a model the layer's input needs a gradient too, so backward computes it
    x = torch.randn(cfg.batch_size, n_tokens, model.embed_dim, generator=gen).to(cfg.device).requires_grad_()
    del model  # keep only the layer: the other blocks would just hold memory

    def forward_backward() -> None:
        layer(x, pos).square().mean().backward()

    def zero_grad() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None

    return Subject(name, layer, forward_backward, zero_grad)


def build_subjects(cfg: BenchmarkConfig) -> list[Subject]:
    """Every row's module and step, built before anything is timed. Bad names or sizes raise ValueError."""
    if cfg.level not in LEVELS:
        raise ValueError(f'level must be one of {LEVELS}, got {cfg.level!r}')
    if cfg.device.startswith('cuda') and not torch.cuda.is_available():
        raise ValueError('device cuda asked for, but torch sees no CUDA device')
    names = resolve_encodings(cfg.encodings, baseline_of(cfg), cfg.level)
    if cfg.level == 'model':
        return [_model_subject(cfg, name) for name in names]
    names += [] if SDPA in names else [SDPA]
    return [_attention_subject(cfg, name) for name in names]


# --- measuring -------------------------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def time_step(step: Callable[[], None], device: str) -> float:
    """Wall time of one step in ms (CUDA is synchronised on both sides, so queued work is counted)."""
    _sync(device)
    start = time.perf_counter()
    step()
    _sync(device)
    return (time.perf_counter() - start) * 1e3


def interleaved_times(subjects: Sequence[Subject], warmup: int, repeats: int, device: str) -> dict[str, list[float]]:
    """Warm every subject up, then time ``repeats`` rounds over all of them; ms per subject, in round order."""
    for _ in range(warmup):
        for subject in subjects:
            subject.step()
    _sync(device)
    gc.collect()
    times: dict[str, list[float]] = {s.name: [] for s in subjects}
    for r in range(repeats):
        # rotate who goes first: a subject that always follows the same neighbour could inherit its cache state
        k = r % len(subjects)
        for subject in [*subjects[k:], *subjects[:k]]:
            times[subject.name].append(time_step(subject.step, device))
    return times


def _cpu_peak_bytes(step: Callable[[], None]) -> int:
    """Peak of the running sum of CPU allocations minus frees during ``step`` (0 = what was live before)."""
    from torch._C._profiler import _EventType  # allocation records; the public event list folds them into ops
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
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


def summarize(times: dict[str, list[float]], peaks: dict[str, float], baseline: str) -> list[dict[str, Any]]:
    """One result dict per row: median and min ms, median / baseline median, peak MiB, the raw times."""
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
                'times_ms': ms,
            }
        )
    return rows


def measure(cfg: BenchmarkConfig, subjects: Sequence[Subject]) -> dict[str, Any]:
    """Time and measure already-built subjects; return the JSON-ready report."""
    load_before = os.getloadavg()[0]  # recorded so that a noisy run can be recognised afterwards
    times = interleaved_times(subjects, cfg.warmup, cfg.repeats, cfg.device)
    # memory after timing: the profiler's overhead must not touch the times
    peaks = {}
    for s in subjects:
        s.zero_grad()  # grads start absent, as in a timed step: the peak then includes allocating them
        peaks[s.name] = peak_memory_mb(s.forward_backward, cfg.device)
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
        'warmup': cfg.warmup,
        'seed': cfg.seed,
        'baseline': baseline_of(cfg),
        'model_kwargs': cfg.model_kwargs,
        'cpu_count': os.cpu_count(),
        'load_avg_1m': [load_before, os.getloadavg()[0]],
        'memory_method': MEMORY_METHODS['cuda' if cfg.device.startswith('cuda') else 'cpu'],
        'results': summarize(times, peaks, baseline_of(cfg)),
    }


def run_benchmark(cfg: BenchmarkConfig) -> dict[str, Any]:
    """Build every subject, then measure them: the whole benchmark as one call."""
    return measure(cfg, build_subjects(cfg))


# --- reporting -------------------------------------------------------------------------------------------------
def write_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write the report as JSON (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + '\n')
    return path


def config_line(report: dict[str, Any]) -> str:
    """One line naming what was run, for above the table."""
    h, w = report['img_size']
    return (
        f'model={report["model"]} img_size={h}x{w} batch={report["batch_size"]} level={report["level"]} '
        f'device={report["device"]} threads={report["threads"]} torch={report["torch"]} '
        f'warmup={report["warmup"]} repeats={report["repeats"]}'
    )


def noise_note(report: dict[str, Any], tolerance: float = 1.2) -> str | None:
    """A warning when some row's median exceeds its min by more than ``tolerance`` (a sign of contention)."""
    worst = max(report['results'], key=lambda r: r['median_ms'] / r['min_ms'])
    spread = worst['median_ms'] / worst['min_ms']
    if spread <= tolerance:
        return None
    before, after = report['load_avg_1m']
    return (
        f'note: noisy timings: {worst["encoding"]} median is {spread:.2f}x its min (1-min load average '
        f'{before:.1f} -> {after:.1f} on {report["cpu_count"]} CPUs); rerun, or try fewer --threads'
    )


def print_report(report: dict[str, Any]) -> None:
    """Print the configuration line, the table (encoding, median ms, min ms, ratio, peak MB) and any noise note."""
    from rich.console import Console
    from rich.table import Table

    table = Table('encoding', 'median ms', 'min ms', f'ratio vs {report["baseline"]}', 'peak MB')
    for column in table.columns[1:]:
        column.justify = 'right'
    for r in report['results']:
        table.add_row(
            r['encoding'], f'{r["median_ms"]:.2f}', f'{r["min_ms"]:.2f}', f'{r["ratio"]:.3f}', f'{r["peak_mb"]:.1f}'
        )
    print(config_line(report))
    Console().print(table)
    note = noise_note(report)
    if note:
        print(note)


__all__ = [
    'LEVELS',
    'MEMORY_METHODS',
    'SDPA',
    'BenchmarkConfig',
    'EncodedAttention',
    'Subject',
    'build_subjects',
    'config_line',
    'default_out_path',
    'interleaved_times',
    'measure',
    'noise_note',
    'normalize_img_size',
    'parse_encoding_spec',
    'peak_memory_mb',
    'print_report',
    'resolve_encodings',
    'run_benchmark',
    'summarize',
    'time_step',
    'write_report',
]
