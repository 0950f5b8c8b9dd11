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
changes or heat falls on every encoding alike. Medians are reported, with min and a ratio to the baseline, the
peak memory of one step, and the SDPA kernel the step ran (read from the profiler's aten ops: flash, efficient,
cudnn or math on CUDA, cpu-flash on CPU, none when the attention weights were materialised).

Options: ``amp`` runs the forward under bf16 autocast; ``compile`` compiles each subject with
``nn.Module.compile`` before the warm-up. ``measure_scaling`` repeats the benchmark at 224, 448 and 672 px and
reports how each encoding's cost grows against the baseline's (rotary and embed encodings should grow like plain
attention; bias encodings carry N^2 tables).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from torch import nn

from vispe.backbones.dit import dit
from vispe.backbones.vit import create_model
from vispe.encodings import EncodingStack, encoding_class, list_encodings
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


#: The issues' speed targets: forward + backward of vit_small_patch16_224 at 224 px, ratio to ape_learned's median
#: (GPU: batch 64, bf16; CPU: batch 8, float32). Benchmarks report them, met or not; no test times anything.
TARGET_SETTING = {
    'cuda': {'model': 'vit_small_patch16_224', 'img_size': [224, 224], 'level': 'model', 'batch_size': 64, 'amp': True},
    'cpu': {'model': 'vit_small_patch16_224', 'img_size': [224, 224], 'level': 'model', 'batch_size': 8, 'amp': False},
}
TARGETS = {
    'cuda': {
        **dict.fromkeys(['rope_axial', 'rope_mixed', 'harope', 'lff', 'peg'], 1.05),
        **dict.fromkeys(['lepe', 'comrope_ap', 'comrope_ld'], 1.15),
        'irpe': 1.4,  # contextual on K, the default
    },
    'cpu': {
        **dict.fromkeys(['rope_axial', 'rope_mixed', 'lff', 'peg'], 1.05),
        **dict.fromkeys(['lepe', 'harope'], 1.10),
        **dict.fromkeys(['comrope_ap', 'comrope_ld', 'irpe:mode=bias'], 1.15),
        'irpe': 1.35,
    },
}


def target_of(report: dict[str, Any], encoding: str) -> float | None:
    """The issues' target ratio for a row of ``report``, or None when the report is not in the targets' setting
    (``TARGET_SETTING``: model, size, level, batch and precision) or the row has none."""
    device = 'cuda' if report['device'].startswith('cuda') else 'cpu'
    if any(report.get(k) != v for k, v in TARGET_SETTING[device].items()):
        return None
    return TARGETS[device].get(encoding)


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
    amp: bool = False  # the forward under torch.autocast(dtype=torch.bfloat16); backward outside it, as torch advises
    compile: bool = False  # nn.Module.compile each subject before its warm-up (compilation is not timed)


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


def training_step(loss: Callable[[], torch.Tensor], cfg: BenchmarkConfig) -> Callable[[], None]:
    """forward + backward of ``loss``: the forward under bf16 autocast when ``cfg.amp``, the backward outside it."""
    device_type = torch.device(cfg.device).type

    def forward_backward() -> None:
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.amp):
            value = loss()
        value.backward()

    return forward_backward


def _dit_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    """A DiT training step: MSE of the prediction on noisy random images at random times and labels."""
    model = _build(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    B = cfg.batch_size
    x = torch.randn(B, model.in_chans, *cfg.img_size, generator=gen).to(cfg.device)
    t = (torch.rand(B, generator=gen) * 1000).to(cfg.device)
    y = torch.randint(model.num_classes, (B,), generator=gen).to(cfg.device)
    target = torch.randn(B, model.out_chans, *cfg.img_size, generator=gen).to(cfg.device)

    def loss() -> torch.Tensor:
        return F.mse_loss(model(x, t, y).float(), target)

    return Subject(name, model, training_step(loss, cfg), lambda: model.zero_grad(set_to_none=True))


def _model_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    if is_dit(cfg.model):
        return _dit_subject(cfg, name)
    model = _build(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    images = torch.randn(cfg.batch_size, model.patch_embed.proj.in_channels, *cfg.img_size, generator=gen)
    images = images.to(cfg.device)
    labels = torch.randint(max(model.num_classes, 1), (cfg.batch_size,), generator=gen).to(cfg.device)

    def loss() -> torch.Tensor:
        out = model(images).float()
        # a headless model (num_classes=0) has no logits to classify: any scalar of its output will do
        return F.cross_entropy(out, labels) if model.num_classes else out.square().mean()

    return Subject(name, model, training_step(loss, cfg), lambda: model.zero_grad(set_to_none=True))


class EncodedAttention(nn.Module):
    """One attention layer plus the model-level encodings' hooks around it (attention-level rows)."""

    def __init__(self, attn: nn.Module, model_level: nn.ModuleDict, num_prefix: int) -> None:
        super().__init__()
        self.attn, self.pe, self.num_prefix = attn, model_level, num_prefix

    def forward(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        stack = EncodingStack(self.pe)  # the backbones' dispatch: active hooks, and after_block where blocks say
        if stack.with_hook('embed'):
            prefix, patches = x[:, : self.num_prefix], x[:, self.num_prefix :]
            x = torch.cat([prefix, stack.embed(patches, pos)], dim=1)
        return stack.after_block(0, self.attn(x, pos), pos)  # the layer is block 0


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

    def loss() -> torch.Tensor:
        return layer(x, pos).float().square().mean()

    def zero_grad() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None

    return Subject(name, layer, training_step(loss, cfg), zero_grad)


def build_subjects(cfg: BenchmarkConfig) -> list[Subject]:
    """Every row's module and step, built before anything is timed. Bad names or sizes raise ValueError."""
    if cfg.level not in LEVELS:
        raise ValueError(f'level must be one of {LEVELS}, got {cfg.level!r}')
    if cfg.device.startswith('cuda') and not torch.cuda.is_available():
        raise ValueError('device cuda asked for, but torch sees no CUDA device')
    names = resolve_encodings(cfg.encodings, baseline_of(cfg), cfg.level)
    if cfg.level == 'model':
        subjects = [_model_subject(cfg, name) for name in names]
    else:
        names += [] if SDPA in names else [SDPA]
        subjects = [_attention_subject(cfg, name) for name in names]
    if cfg.compile:
        compile_subjects(subjects)
    return subjects


#: warm-up steps of a compiled subject, whatever ``warmup`` says (see ``measure``)
COMPILE_WARMUP = 3


def compile_subjects(subjects: Sequence[Subject]) -> None:
    """``nn.Module.compile`` every subject in place (compilation happens at its first step; see ``compile_limits``)."""
    for subject in subjects:
        subject.module.compile()


def compile_limits(num_subjects: int):
    """A context for running compiled subjects: subjects of one class share their forward's code object, and dynamo
    keeps a bounded number of compiled versions per code object before it runs eager. Inside, the limits fit every
    row, and hitting them raises instead of timing eager code under a 'compiled' label; outside, torch's defaults
    stay as they were."""
    import torch._dynamo

    config = torch._dynamo.config
    needed = 4 * num_subjects  # a few versions each (train mode, grad mode, shapes)
    return config.patch(
        recompile_limit=max(config.recompile_limit, needed),
        accumulated_recompile_limit=max(config.accumulated_recompile_limit, 8 * needed),
        fail_on_recompile_limit_hit=True,
    )


# --- measuring -------------------------------------------------------------------------------------------------
def synchronize(device: str) -> None:
    """Wait for queued CUDA work (a no-op on CPU), so that a clock read after it counts that work."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def time_step(step: Callable[[], None], device: str) -> float:
    """Wall time of one step in ms (CUDA is synchronised on both sides, so queued work is counted)."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def interleaved_times(subjects: Sequence[Subject], warmup: int, repeats: int, device: str) -> dict[str, list[float]]:
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
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:  # aten ops are recorded on the host for CUDA too
        step()
    synchronize('cuda' if torch.cuda.is_available() else 'cpu')
    kernels = {SDPA_KERNELS[e.name] for e in prof.events() if e.name in SDPA_KERNELS}
    return '+'.join(sorted(kernels)) or NO_SDPA


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
#: how each kind of encoding's cost should grow with the token count N, against plain attention
GROWTH_EXPECTED = {
    'embed': 'proportional: one (N, D) table added to the tokens, O(N D)',
    'rotary': 'proportional: q and k rotated by (N, d) tables, O(N d); the attention stays fused',
    'value': 'proportional: a depthwise convolution of V added to the output, O(N d)',
    'bias': 'faster: an (N, N) bucket-id table and a (B, H, N, N) logit bias beside the fused kernel, O(N^2)',
    'none': 'the reference: fused SDPA alone',
}


def encoding_kind(name: str) -> str:
    """For a row spec: 'bias' (a logit bias or a value term over the attention weights: N^2 tables), 'rotary'
    (rotates q and k), 'value' (a term computed from V alone), 'embed' (changes the tokens); 'none' for the
    plain-attention row."""
    if name == SDPA:
        return 'none'
    hooks: set[str] = set()
    for part in parse_encoding_spec(name):
        cls = encoding_class(part if isinstance(part, str) else part['type'])
        hooks |= cls.hooks()
    if 'logit_bias' in hooks:
        return 'bias'
    if 'rotate' in hooks:
        return 'rotary'
    return 'value' if 'value_term' in hooks else 'embed'


def measure_scaling(cfg: BenchmarkConfig, sizes: Sequence[int] = SCALING_SIZES) -> dict[str, Any]:
    """The benchmark at each square size (each size's subjects built, measured and freed before the next), and
    per encoding its time at every size relative to the baseline there, plus its growth from the first size to
    the last divided by the baseline's growth (1.0 = grows like the baseline)."""
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


def print_scaling(report: dict[str, Any]) -> None:
    """The per-size tables, then one table of ratios by size and growth relative to the baseline, and what each
    kind of encoding is expected to do."""
    from rich.table import Table

    for sized in report['reports']:
        print_report(sized)
    sizes = report['sizes']
    table = Table(
        'encoding',
        'kind',
        *(f'ratio @{s}' for s in sizes),
        f'growth {sizes[0]}->{sizes[-1]} vs {report["baseline"]}',
        f'peak MB @{sizes[-1]}',
        title='scaling with resolution',
    )
    for column in table.columns[2:]:
        column.justify = 'right'
    for r in report['scaling']:
        table.add_row(
            r['encoding'],
            r['kind'],
            *(f'{x:.3f}' for x in r['ratio']),
            f'{r["growth_vs_baseline"]:.3f}',
            f'{r["peak_mb"][-1]:.1f}',
        )
    console().print(table)
    for kind in sorted({r['kind'] for r in report['scaling']}):
        print(f'{kind}: expected growth {GROWTH_EXPECTED[kind]}')


# --- reporting -------------------------------------------------------------------------------------------------
def write_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write the report as JSON (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + '\n')
    return path


def console():
    """rich's console, wide enough for the tables when the output is a file or a pipe (rich assumes 80 columns)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def config_line(report: dict[str, Any]) -> str:
    """One line naming what was run, for above the table."""
    h, w = report['img_size']
    return (
        f'model={report["model"]} img_size={h}x{w} batch={report["batch_size"]} level={report["level"]} '
        f'device={report["device"]} threads={report["threads"]} torch={report["torch"]} '
        f'warmup={report["warmup"]} repeats={report["repeats"]} amp={"bf16" if report.get("amp") else "off"} '
        f'compile={"on" if report.get("compile") else "off"}'
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


def target_text(ratio: float, target: float | None) -> str:
    """'<= 1.05 met', '<= 1.05 NOT met', or '' without a target."""
    if target is None:
        return ''
    return f'<= {target:.2f} {"met" if ratio <= target else "NOT met"}'


def summary_markdown(reports: Sequence[dict[str, Any]]) -> str:
    """One markdown table of several reports of the same rows (e.g. tools/gpu_check.sh's 224 / 448 px, eager /
    compiled): per encoding its ratio in each report, the SDPA kernel of the first, peak MB of each and the target
    where the first report is in the targets' setting."""

    def label(report: dict[str, Any]) -> str:
        h, w = report['img_size']
        size = h if h == w else f'{h}x{w}'
        return f'{size} px{" bf16" if report.get("amp") else ""}{" compiled" if report.get("compile") else ""}'

    head = ['encoding', 'kind', *(f'ratio {label(r)}' for r in reports), *(f'MB {label(r)}' for r in reports)]
    head += ['SDPA kernel', 'target']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    rows = [{r['encoding']: r for r in report['results']} for report in reports]
    for name, first in rows[0].items():
        ratios = [f'{by[name]["ratio"]:.3f}' if name in by else '-' for by in rows]
        peaks = [f'{by[name]["peak_mb"]:.0f}' if name in by else '-' for by in rows]
        target = target_text(first['ratio'], target_of(reports[0], name))
        cells = [name, encoding_kind(name), *ratios, *peaks, first.get('sdpa', ''), target]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join([config_line(reports[0]), '', *lines]) + '\n'


def print_report(report: dict[str, Any]) -> None:
    """Print the configuration line, the table (encoding, median ms, min ms, ratio, peak MB, SDPA kernel) and any
    noise note."""
    from rich.table import Table

    table = Table(
        'encoding', 'median ms', 'min ms', f'ratio vs {report["baseline"]}', 'peak MB', 'SDPA kernel', 'target'
    )
    for column in table.columns[1:5]:
        column.justify = 'right'
    for r in report['results']:
        table.add_row(
            r['encoding'],
            f'{r["median_ms"]:.2f}',
            f'{r["min_ms"]:.2f}',
            f'{r["ratio"]:.3f}',
            f'{r["peak_mb"]:.1f}',
            r.get('sdpa', ''),
            target_text(r['ratio'], target_of(report, r['encoding'])),
        )
    print(config_line(report))
    console().print(table)
    note = noise_note(report)
    if note:
        print(note)


__all__ = [
    'COMPILE_WARMUP',
    'GROWTH_EXPECTED',
    'LEVELS',
    'MEMORY_METHODS',
    'NO_SDPA',
    'SCALING_SIZES',
    'SDPA',
    'SDPA_KERNELS',
    'TARGETS',
    'TARGET_SETTING',
    'BenchmarkConfig',
    'EncodedAttention',
    'Subject',
    'build_subjects',
    'compile_limits',
    'compile_subjects',
    'config_line',
    'console',
    'default_out_path',
    'encoding_kind',
    'interleaved_times',
    'measure',
    'measure_scaling',
    'noise_note',
    'normalize_img_size',
    'parse_encoding_spec',
    'peak_memory_mb',
    'print_report',
    'print_scaling',
    'resolve_encodings',
    'run_benchmark',
    'scaling_rows',
    'sdpa_backend',
    'summarize',
    'summary_markdown',
    'training_step',
    'time_step',
    'write_report',
]
