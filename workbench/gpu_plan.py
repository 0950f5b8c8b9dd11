"""What the GPU check (``workbench.gpu_steps``) runs: its two model settings and the attention core's, the
rows, the seconds each step is expected to take on an H200 (guesses: a step expected to overrun is skipped), and the
order compiled rows are spent in. ``plan_for('cpu')`` is the same plan at toy sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vispe.bench.measure import BenchmarkConfig
from vispe.bench.subjects import VIDEO_SMALL, default_rows

#: the encodings with a GPU target, most important first: compiled rows follow this order after ape_learned
TARGET_ORDER = (
    'rope_axial',
    'rope_mixed',
    'rope_dinov3',
    'harope',
    'comrope_ap',
    'comrope_ld',
    'string_cayley',
    'string_circulant',
    'liere',
    'irpe',
    'alibi2d',
    'lepe',
    'loope',
)
#: (timm's own model, vispe's row of the same architecture, the encoding it goes with); ape_learned is what
#: ``vispe.create_model('vit_small_patch16_224')`` builds (rows)
TIMM_PAIRS = (
    ('timm:vit_small_patch16_224', 'ape_learned', 'ape_learned'),
    ('timm:vit_small_patch16_rope_mixed_224', 'vispe:vit_small_patch16_rope_mixed_224', 'rope_mixed'),
    ('timm:vit_small_patch16_dinov3', 'vispe:vit_small_patch16_dinov3', 'rope_dinov3'),
)
BASELINE = 'ape_learned'


@dataclass(frozen=True)
class Setting:
    """One benchmark setting: a model at an image size and batch, with its warm-up and timed rounds."""

    label: str
    model: str
    img_size: int
    batch_size: int
    warmup: int
    repeats: int
    model_kwargs: dict[str, Any] = field(default_factory=dict)

    def config(self, device: str, **changes: Any) -> BenchmarkConfig:
        """The benchmark's config of this setting: bf16 autocast, forward + backward."""
        cfg = BenchmarkConfig(
            model=self.model,
            img_size=(self.img_size, self.img_size),
            batch_size=self.batch_size,
            warmup=self.warmup,
            repeats=self.repeats,
            device=device,
            amp=True,
            model_kwargs=dict(self.model_kwargs),
        )
        return replace(cfg, **changes)


@dataclass(frozen=True)
class Plan:
    """What the check runs on one device, and the seconds each step is expected to take (to skip what would not
    fit; ``compile_s``: one model's compilation before any was measured, ``row_s``: timing and profiling one
    compiled row)."""

    device: str
    small: Setting
    large: Setting
    encodings: tuple[str, ...]
    mixed_encodings: tuple[str, ...]
    #: the attention cores where FlexAttention is compared with SDPA (issue 37: iRPE at 1024 px, N = 4097)
    huge: Setting | None = None
    #: the space-time ViT on clips (issue 43) and its rows: the video encodings against ape_learned, eager
    video: Setting | None = None
    video_encodings: tuple[str, ...] = ()
    flex_rows: tuple[str, ...] = ('irpe', 'irpe:mode=bias', 'alibi2d')
    pairs: tuple[tuple[str, str, str], ...] = TIMM_PAIRS
    throughput_config: str = 'configs/vit/vit_tiny_rope_mixed_shapes2d_position.py'
    throughput_iters: int = 30
    throughput_rounds: int = 3
    tests: tuple[str, ...] = ('tests',)
    tests_cap_s: float = 150.0
    compile_backend: str = 'inductor'
    compile_scope: str = 'blocks'
    compile_s: float = 20.0
    row_s: float = 3.0
    estimates: dict[str, float] = field(default_factory=dict)


def plan_for(
    device: str,
    encodings: Sequence[str] | None = None,
    compile_backend: str = 'inductor',
    compile_scope: str = 'blocks',
) -> Plan:
    """The GPU plan (``device='cuda'``), or the same steps at toy sizes on the CPU. ``encodings``: the rows
    (default: every image encoding). ``compile_scope``: 'blocks' (default) compiles each transformer block, one
    compilation that every block reuses, so that the compiled rows of both settings fit the budget; 'model' the whole
    model, as ``nn.Module.compile`` would (tens of seconds a row)."""
    from vispe.encodings import list_encodings

    rows = tuple(encodings or list_encodings(ndim=2))
    if device == 'cuda':
        small = Setting('ViT-S/16 224 px b64', 'vit_small_patch16_224', 224, 64, warmup=3, repeats=10)
        large = Setting('ViT-B/16 448 px b16', 'vit_base_patch16_224', 448, 16, warmup=2, repeats=6)
        estimates = {'eager_small': 45.0, 'eager_large': 40.0, 'attention_small': 20.0, 'mixed': 30.0}
        estimates |= {
            'throughput': 30.0,
            'attention_large': 20.0,
            'attention_huge': 20.0,
            'attention_huge_flex': 60.0,  # FlexAttention compiles a kernel per score term
            'attention_small_flex': 60.0,
            'attention_large_flex': 60.0,
        }  # H200 guesses: a step expected to overrun is skipped
        mixed = ('ape_learned', 'rope_axial', 'rope_mixed', 'irpe', 'alibi2d', 'lepe')
        huge = Setting('ViT-B/16 1024 px b2', 'vit_base_patch16_224', 1024, 2, warmup=2, repeats=6)
        # ViT-S on 16 frames of 224 px in 2 x 16 x 16 tubelets: 8 x 14 x 14 = 1568 tokens, head dim 64
        video_args = dict(VIDEO_SMALL, num_frames=16, tubelet_size=2)
        video = Setting('video ViT-S 16 x 224 px b8', 'video', 224, 8, warmup=2, repeats=6, model_kwargs=video_args)
        estimates['video'] = 40.0
        return Plan(
            device,
            small,
            large,
            rows,
            mixed,
            huge=huge,
            video=video,
            video_encodings=video_rows(),
            compile_backend=compile_backend,
            compile_scope=compile_scope,
            compile_s=20.0 if compile_scope == 'blocks' else 50.0,
            estimates=estimates,
        )
    toy = dict(depth=1)
    small = Setting('toy ViT-S 32 px b2', 'vit_small_patch16_224', 32, 2, warmup=1, repeats=2, model_kwargs=toy)
    large = Setting('toy ViT-B 48 px b1', 'vit_base_patch16_224', 48, 1, warmup=1, repeats=2, model_kwargs=toy)
    huge = Setting('toy ViT-B 64 px b1', 'vit_base_patch16_224', 64, 1, warmup=1, repeats=2, model_kwargs=toy)
    toy_video = dict(num_frames=4, depth=1)
    video = Setting('toy video 4 x 16 px b1', 'video', 16, 1, warmup=1, repeats=2, model_kwargs=toy_video)
    return Plan(
        device,
        small,
        large,
        rows,
        ('ape_learned', 'rope_mixed'),
        huge=huge,
        video=video,
        video_encodings=('ape_learned', 'rope_axial'),
        flex_rows=('alibi2d',),
        throughput_iters=3,
        tests_cap_s=300.0,
        compile_backend=compile_backend,
        compile_scope=compile_scope,
        compile_s=20.0,
        row_s=1.0,
    )


def video_rows() -> tuple[str, ...]:
    """The video step's rows: the benchmark's default video rows (``vispe.bench.subjects.default_rows('video')``)."""
    return tuple(default_rows('video'))


def compile_order(plan: Plan, setting: Setting) -> list[str]:
    """The compiled rows of ``setting``, most important first: the baseline, the target encodings in
    ``TARGET_ORDER`` each followed by its timm pair (small setting only), then the other encodings."""
    pairs = plan.pairs if setting == plan.small else ()
    encodings = [e for e in plan.encodings if e != BASELINE]
    ordered = [BASELINE] + [e for e in TARGET_ORDER if e in encodings] + [e for e in encodings if e not in TARGET_ORDER]
    rows: list[str] = []
    for encoding in ordered:
        rows.append(encoding)
        rows += [row for timm_row, vispe_row, anchor in pairs if anchor == encoding for row in (timm_row, vispe_row)]
    rows += [row for timm_row, vispe_row, _ in pairs for row in (timm_row, vispe_row)]  # pairs of absent anchors
    return list(dict.fromkeys(rows))


__all__ = ['BASELINE', 'TARGET_ORDER', 'TIMM_PAIRS', 'Plan', 'Setting', 'compile_order', 'plan_for', 'video_rows']
