"""What a batch of mixed image sizes costs: one training step (forward + backward) of a fixed-size batch, of a padded
mixed batch and of a packed one, side by side in one process, at the same token count and with the same weights.

``fixed``: B images of T = P + N tokens (P prefix, N patches); ``padded``: B images at native aspect ratios under the
budget N (``native_grids``), one per row, padded to the longest; ``packed``: square sizes (``flexi_grids``) packed
first-fit into rows of T tokens, the B fullest rows kept (``packed_rows``), so the batch is the fixed one's B x T
tensor; ``padded (flexi)``: the packed images padded one per row instead. A ratio is ``timing.paired_ratio`` of the
round's step over the fixed batch's, judged against a target on ``timing.ratio_interval`` (``verdict``).
"""

from __future__ import annotations

import copy
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from vispe.backbones import VisionTransformerPE, create_model
from vispe.bench.measure import BenchmarkConfig
from vispe.bench.subjects import training_step, vit_kwargs
from vispe.bench.timing import Subject, interleaved_times, paired_ratio, ratio_interval
from vispe.encodings.build import parse_encoding_spec, split_variant
from vispe.layout import make_layout


def native_grids(grid: tuple[int, int], count: int, generator: torch.Generator) -> list[tuple[int, int]]:
    """``count`` grids at aspect ratios (w / h) log-uniform in [1/3, 3], each the largest grid of its ratio with at
    most h * w of ``grid`` tokens (NaFlex's rule)."""
    budget = grid[0] * grid[1]
    grids = []
    for u in torch.rand(count, generator=generator).tolist():
        ratio = math.exp((2 * u - 1) * math.log(3))
        h = max(1, min(budget, int(math.sqrt(budget / ratio))))
        grids.append((h, max(1, budget // h)))
    return grids


def flexi_grids(grid: tuple[int, int], total: int, generator: torch.Generator) -> list[tuple[int, int]]:
    """Square grids with sides uniform in [side / 2, side] (side = the smaller of ``grid``) until the next one would
    pass ``total`` tokens; the remainder is filled by one smaller square, so the tokens add up to about ``total``."""
    side = min(grid)
    grids: list[tuple[int, int]] = []
    used = 0
    while True:
        s = int(torch.randint(max(1, side // 2), side + 1, (), generator=generator))
        if used + s * s > total:
            rest = int(math.isqrt(total - used))
            if rest:
                grids.append((rest, rest))
            return grids
        grids.append((s, s))
        used += s * s


def packed_rows(grids: Sequence[tuple[int, int]], capacity: int, rows: int, prefix: int = 0) -> list[tuple[int, int]]:
    """The grids, in input order, that first-fit packing (``vispe.layout.make_layout``) puts in its ``rows`` fullest
    rows of ``prefix + capacity`` tokens: at most the fixed batch's tensor."""
    layout = make_layout(grids, prefix, 'pack', capacity)
    fill = [0] * layout.num_rows
    for (h, w), row in zip(layout.grids, layout.rows):
        fill[row] += prefix + h * w
    kept = set(sorted(range(layout.num_rows), key=lambda r: -fill[r])[:rows])
    return [g for g, row in zip(layout.grids, layout.rows) if row in kept]


def _subject(cfg: BenchmarkConfig, name: str, model: VisionTransformerPE, images: Any, labels: torch.Tensor) -> Subject:
    """One training step of ``model`` on ``images``: the forward under bf16 autocast when ``cfg.amp``."""

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(images).float(), labels)

    return Subject(name, model, training_step(loss, cfg), lambda: model.zero_grad(set_to_none=True))


def mixed_subjects(cfg: BenchmarkConfig, encoding: str) -> tuple[list[Subject], dict[str, dict[str, Any]]]:
    """The four subjects of one encoding (module docstring) and, per subject, its images and token slots."""
    torch.manual_seed(cfg.seed)
    spec = parse_encoding_spec(split_variant(encoding)[0])
    model = create_model(cfg.model, encoding=spec, img_size=cfg.img_size, **vit_kwargs(cfg, encoding))
    if not isinstance(model, VisionTransformerPE):
        raise TypeError(f'the mixed-size benchmark times a vispe ViT, but {cfg.model} built a {type(model).__name__}')
    model = model.to(cfg.device).train()
    patch = model.patch_embed.patch_size
    grid = (cfg.img_size[0] // patch[0], cfg.img_size[1] // patch[1])
    gen = torch.Generator().manual_seed(cfg.seed)
    B, N, C = cfg.batch_size, grid[0] * grid[1], model.patch_embed.proj.in_channels
    P = model.num_prefix_tokens

    def draw(grids: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
        return [torch.randn(C, h * patch[0], w * patch[1], generator=gen).to(cfg.device) for h, w in grids]

    native = native_grids(grid, B, gen)
    flexi = packed_rows(flexi_grids(grid, 2 * B * N, gen), N, B, P)
    fixed, padded, packed = torch.randn(B, C, *cfg.img_size, generator=gen).to(cfg.device), draw(native), draw(flexi)
    batches = {  # images, layout, their grids, pack_tokens
        'fixed': (fixed, 'pad', [grid] * B, None),
        'padded': (padded, 'pad', native, None),
        'packed': (packed, 'pack', flexi, N),
        'padded (flexi)': (packed, 'pad', flexi, None),
    }
    subjects, info = [], {}
    for name, (images, mode, grids, capacity) in batches.items():
        copy_ = copy.deepcopy(model)
        copy_.set_mixed_sizes(mode, capacity)
        count = len(grids)
        labels = torch.randint(max(model.num_classes, 1), (count,), generator=gen).to(cfg.device)
        subjects.append(_subject(cfg, name, copy_, images, labels))
        info[name] = dict(
            images=count, real_tokens=sum(P + h * w for h, w in grids), slots=_slots(grids, mode, capacity, P)
        )
    return subjects, info


def _slots(grids: Sequence[tuple[int, int]], mode: str, capacity: int | None, prefix: int) -> int:
    """Token slots the layout computes over: rows x tokens per row (prefix slots, patch tokens and padding)."""
    layout = make_layout(grids, prefix, mode, capacity)
    return layout.num_rows * layout.length


def run_mixed_benchmark(
    cfg: BenchmarkConfig, encodings: Sequence[str], targets: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """Per encoding: median ms of each subject, its ratio to ``fixed``, token counts, and whether ``targets`` (layout
    -> the most its ratio may be) hold."""
    rows = []
    load_before = os.getloadavg()[0]
    targets = dict(targets or {})
    for encoding in encodings:
        subjects, info = mixed_subjects(cfg, encoding)
        times = interleaved_times(subjects, cfg.warmup, cfg.repeats, cfg.device)
        base = statistics.median(times['fixed'])
        for name, ms in times.items():
            ratio = paired_ratio(ms, times['fixed'])
            target = targets.get(name)
            interval = ratio_interval(ms, times['fixed'])
            rows.append(
                dict(
                    encoding=encoding,
                    batch=name,
                    median_ms=statistics.median(ms),
                    min_ms=min(ms),
                    ratio=ratio,
                    ratio_of_medians=statistics.median(ms) / base,
                    ratio_interval=list(interval),
                    target=target,
                    meets_target=None if target is None else ratio <= target,
                    verdict=None if target is None else verdict(interval, target),
                    per_real_token=ratio * info['fixed']['real_tokens'] / info[name]['real_tokens'],
                    times_ms=ms,
                    **info[name],
                )
            )
    return dict(
        model=cfg.model,
        img_size=list(cfg.img_size),
        batch_size=cfg.batch_size,
        device=cfg.device,
        amp=cfg.amp,
        threads=torch.get_num_threads(),
        repeats=cfg.repeats,
        warmup=cfg.warmup,
        seed=cfg.seed,
        model_kwargs=cfg.model_kwargs,
        load_avg_1m=[load_before, os.getloadavg()[0]],
        targets=targets,
        results=rows,
    )


def verdict(interval: Sequence[float], target: float) -> str:
    """'met' when the whole 90% interval of the ratio is at or under ``target``, 'missed' when all of it is above,
    else 'undecided' (the noise spans the target)."""
    lo, hi = interval
    return 'met' if hi <= target else 'missed' if lo > target else 'undecided'


def mixed_markdown(report: dict[str, Any]) -> str:
    """The report as a markdown table: one line per encoding and batch."""
    lines = [
        '| encoding | batch | images | real tokens | token slots | median ms | ratio to fixed | 90% interval | '
        'per real token | target (median; interval) |',
        '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in report['results']:
        lo, hi = r['ratio_interval']
        target = ''
        if r['target'] is not None:
            target = f'<= {r["target"]:.2f} ({"met" if r["meets_target"] else "MISSED"}; {r["verdict"]})'
        lines.append(
            f'| {r["encoding"]} | {r["batch"]} | {r["images"]} | {r["real_tokens"]} | {r["slots"]} | '
            f'{r["median_ms"]:.1f} | {r["ratio"]:.3f} | {lo:.3f}-{hi:.3f} | {r["per_real_token"]:.3f} | {target} |'
        )
    return '\n'.join(lines)


__all__ = [
    'flexi_grids',
    'mixed_markdown',
    'mixed_subjects',
    'native_grids',
    'packed_rows',
    'run_mixed_benchmark',
    'verdict',
]
