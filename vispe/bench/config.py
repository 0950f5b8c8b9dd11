"""What a benchmark measures (``BenchmarkConfig``), apart from how it measures it (``vispe.bench.measure``), so
that the subjects and rows it builds can take it without importing the benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BenchmarkConfig:
    """What to measure. ``encodings=None`` means every image (2D) encoding; 'a+b' names a combination and
    'name:key=value,...' sets an encoding's arguments (``vispe.encodings.build.parse_encoding_spec``)."""

    model: str = 'vit_small_patch16_224'
    img_size: tuple[int, int] = (224, 224)
    batch_size: int = 8
    encodings: Sequence[str] | None = None
    baseline: str | None = None  # None: each backbone's own default (subjects.DEFAULT_BASELINE)
    level: str = 'model'
    warmup: int = 3
    repeats: int = 10
    device: str = 'cpu'
    seed: int = 0
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    amp: bool = False  # the forward under torch.autocast(dtype=torch.bfloat16); backward outside it, as torch advises
    compile: bool = False  # nn.Module.compile each subject before its warm-up (compilation is not timed)
    compile_scope: str = 'model'  # 'blocks': each transformer block compiled, not the whole model (compile_module)
    attention_kernel: str = 'auto'  # where bias encodings and mixed batches attend: 'auto', 'sdpa', 'flex' (vispe.flex)


def normalize_img_size(size: int | Sequence[int]) -> tuple[int, int]:
    """224 or [224] -> (224, 224); (H, W) stays."""
    if isinstance(size, int):
        return size, size
    size = [int(s) for s in size]
    if len(size) not in (1, 2):
        raise ValueError(f'image size is one int or two (H W), got {size}')
    return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])


__all__ = ['BenchmarkConfig', 'normalize_img_size']
