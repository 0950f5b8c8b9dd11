"""A trained checkpoint as an evaluable model, what every sweep builds on: load it, label it, read its training
resolution, switch its encodings' resolution strategies, evaluate it."""

from __future__ import annotations

import copy
import inspect
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from vispe.datasets.augment import check_resize
from vispe.encodings.base import Encoding
from vispe.encodings.build import spec_items, spec_text
from vispe.engine.checkpoint import load_checkpoint
from vispe.engine.config import flat_config
from vispe.engine.config_record import recorded_config_or_none
from vispe.engine.run_meta import META_KEYS, align_training_grid, resolution_label, trained_on, trained_sizes
from vispe.registry import DATASETS, MODELS

Resolution = int | tuple[int, int]


def parse_resolution(text: str) -> Resolution:
    """'64' -> 64, '48x64' -> (48, 64) (height x width)."""
    parts = text.lower().split('x')
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f'resolution {text!r} is not an int or HxW (e.g. 64 or 48x64)') from None
    if len(values) not in (1, 2) or min(values) <= 0:
        raise ValueError(f'resolution {text!r} is not a positive int or HxW (e.g. 64 or 48x64)')
    return values[0] if len(values) == 1 else (values[0], values[1])


#: the default resolution sweep, as multiples of the training size: below and above it
DEFAULT_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
#: the default sweep's non-square targets at the training token count, as height / width: tall 2:1, wide 1:2
DEFAULT_ASPECTS = (2.0, 0.5)


def _hw(res: Resolution | Sequence[int]) -> tuple[int, int]:
    return (res, res) if isinstance(res, int) else (int(res[0]), int(res[1]))


def _nearest(x: float) -> int:
    """x rounded to the nearest int, halves up (not Python's round-half-even), at least 1."""
    return max(1, math.floor(x + 0.5))


def default_resolutions(
    train: Resolution | Sequence[int],
    patch: int | Sequence[int],
    scales: Sequence[float] = DEFAULT_SCALES,
    aspects: Sequence[float] = DEFAULT_ASPECTS,
) -> list[Resolution]:
    """The resolutions eval_resolution runs by default: ``scales`` x the training size, then the ``aspects`` (height /
    width) at the training token count; ints for a square training size, else (H, W) pairs, duplicates listed once.

    A scaled side is rounded to the nearest multiple of the patch (halves up), at least one patch. An aspect a >= 1 at N
    tokens has its short side round(sqrt(N / a)) tokens (round(sqrt(N a)) for a < 1) and its long side round(N / short).
    """
    (th, tw), (ph, pw) = _hw(train), _hw(patch)
    out: list[Resolution] = []

    def add(h: int, w: int) -> None:
        res: Resolution = h if h == w and th == tw else (h, w)
        if res not in out:
            out.append(res)

    for f in scales:
        add(_nearest(f * th / ph) * ph, _nearest(f * tw / pw) * pw)
    tokens = (th // ph) * (tw // pw)
    for a in aspects:
        if a >= 1:
            w = _nearest(math.sqrt(tokens / a))
            h = _nearest(tokens / w)
        else:
            h = _nearest(math.sqrt(tokens * a))
            w = _nearest(tokens / h)
        add(h * ph, w * pw)
    return out


def model_patch_size(model: torch.nn.Module) -> tuple[int, int]:
    """The (height, width) patch size of the model's backbone."""
    backbone = getattr(model, 'backbone', model)
    size = getattr(getattr(backbone, 'patch_embed', None), 'patch_size', None)
    if size is None:
        raise ValueError(
            f'{type(backbone).__name__} has no patch_embed.patch_size to round the default resolutions to; '
            'pass the resolutions (--resolutions 16 32 48x24)'
        )
    return _hw(size if isinstance(size, int) else tuple(size))


def check_resolutions(model: torch.nn.Module, resolutions: Sequence[Resolution]) -> None:
    """ValueError naming every one of ``resolutions`` the model's patch does not divide, before a sweep runs any."""
    backbone = getattr(model, 'backbone', model)
    if getattr(getattr(backbone, 'patch_embed', None), 'patch_size', None) is None:
        return
    ph, pw = model_patch_size(model)
    bad = [_hw(r) for r in resolutions if _hw(r)[0] % ph or _hw(r)[1] % pw]
    if bad:
        given = ', '.join(resolution_label(h if h == w else (h, w)) for h, w in bad)
        near = ', '.join(
            resolution_label(a if a == b else (a, b))
            for a, b in ((max(ph, round(h / ph) * ph), max(pw, round(w / pw) * pw)) for h, w in bad)
        )
        raise ValueError(
            f"--resolutions {given}: not divisible by the model's patch {ph}x{pw}; use multiples of the patch "
            f'(nearest: {near}); nothing was evaluated'
        )


def training_setting(cfg: Any, meta: dict | None, key: str, what: str) -> Any:
    """``run_meta.trained_on``, or a ValueError naming where it looked for the training ``what``."""
    value = trained_on(cfg, meta, key)
    if value is None:
        raise ValueError(
            f'neither the checkpoint meta nor the config (train_dataloader.dataset.{META_KEYS[key]}, {key}) gives '
            f'the training {what}'
        )
    return value


def train_resolution(cfg: Any, meta: dict | None = None) -> Resolution:
    """The resolution the model was trained at (``training_setting``)."""
    return training_setting(cfg, meta, 'train_resolution', 'resolution')


def training_record(cfg: Any, meta: dict | None) -> dict[str, Any]:
    """What a results.json says the model trained on: ``train_resolution``, or None and ``train_sizes``."""
    sizes = trained_sizes(cfg, meta)
    if sizes:
        return {'train_resolution': None, 'train_sizes': sizes}
    return {'train_resolution': train_resolution(cfg, meta)}


def label_by_checkpoint(cfg: Any, meta: dict | None) -> None:
    """Make ``cfg``'s val and test data sets label by the checkpoint's training class names, where they take ``classes``
    and the config sets none."""
    names = ((meta or {}).get('dataset_meta') or {}).get('classes')
    if not names:
        return
    for split in ('val', 'test'):
        dataset = (cfg.get(f'{split}_dataloader') or {}).get('dataset')
        if not isinstance(dataset, dict) or not isinstance(dataset.get('type'), str) or dataset.get('classes'):
            continue
        kind = DATASETS.get(dataset['type'])
        if kind is not None and 'classes' in inspect.signature(kind).parameters:
            dataset['classes'] = list(names)


def load_model(cfg: Any, checkpoint: str, device: str) -> tuple[torch.nn.Module, dict]:
    """(the config's model with the checkpoint's weights on ``device``, in eval mode; the checkpoint's meta). The
    checkpoint must fit key for key unless ``load_strict = False``; the encodings' training grid follows the checkpoint
    (a warning where it differs), and the data sets label by its class names."""
    init_default_scope(cfg.get('default_scope', 'vispe'))
    model = MODELS.build(copy.deepcopy(cfg.model))
    ckpt = load_checkpoint(checkpoint, model, strict=cfg.get('load_strict', True))
    meta = dict(ckpt.get('meta') or {})
    label_by_checkpoint(cfg, meta)
    for note in align_training_grid(model, cfg, meta):  # the strategies scale from what the run trained on
        warnings.warn(note, UserWarning, stacklevel=2)
    return model.to(device).eval(), meta


def build_model(cfg: Any, checkpoint: str, device: str) -> torch.nn.Module:
    """``load_model`` without the meta."""
    return load_model(cfg, checkpoint, device)[0]


def model_encodings(model: torch.nn.Module) -> list[Encoding]:
    """Every encoding instance in the model."""
    return [m for m in model.modules() if isinstance(m, Encoding)]


def encoding_label(model: torch.nn.Module, meta: dict | None = None) -> str:
    """The model's encodings as a row label ('rope_mixed', 'ape_learned+rope_axial', 'none'), with the options the
    recorded config gives them."""
    backbone = getattr(model, 'backbone', model)
    names = getattr(backbone, 'encoding_names', None)
    bare = '+'.join(names) if names else 'none'
    recorded = recorded_config_or_none({'meta': meta or {}})
    spec = ((recorded.get('model') or {}).get('backbone') or {}).get('encoding') if recorded is not None else None
    if spec is None:
        return bare
    types = [item['type'] if isinstance(item, dict) else item for item in spec_items(spec)]
    return spec_text(spec, skip=('strategy',)) if sorted(types) == sorted(names or []) else bare


def trained_config(meta: dict | None) -> dict[str, Any]:
    """``{'trained_config': {dotted key: value}}``: the model and training-data entries recorded; {} if none."""
    recorded = recorded_config_or_none({'meta': meta or {}})
    if recorded is None:
        return {}
    flat = flat_config({k: recorded.get(k) for k in ('model', 'train_dataloader') if recorded.get(k) is not None})
    return {'trained_config': json.loads(json.dumps(flat, default=repr))}


def _accepts(enc: Encoding, strategy: str) -> bool:
    """Whether ``enc`` takes ``strategy`` as built; its own strategy is left as it was."""
    current = enc.strategy
    try:
        enc.strategy = strategy
    except ValueError:
        return False
    finally:
        enc.strategy = current
    return True


def available_strategies(model: torch.nn.Module, opt_in: bool = False) -> list[str]:
    """Resolution strategies the model's encodings support and accept, defaults first; ['default'] when none do. Opt-in
    ones only with ``opt_in`` or when set."""
    seen: list[str] = []
    for enc in model_encodings(model):
        for s in type(enc).strategies:
            wanted = opt_in or s not in type(enc).opt_in_strategies or s == enc.strategy  # its own, if set
            if s not in seen and wanted and _accepts(enc, s):
                seen.append(s)
    return seen or ['default']


def check_strategies(model: torch.nn.Module, strategies: Sequence[str] | None) -> list[str]:
    """``strategies``, or every supported one but those; ValueError naming the supported ones for others."""
    supported = available_strategies(model, opt_in=True)
    strategies = list(strategies or available_strategies(model))
    unknown = [s for s in strategies if s not in supported]
    gridless = [s for s in unknown if any(s in type(enc).strategies for enc in model_encodings(model))]
    if gridless:
        raise ValueError(
            f'strategies {gridless} scale positions from one training size, and this model has none (the checkpoint '
            f'was trained on several sizes): choose from {supported}'
        )
    if unknown:
        raise ValueError(f"strategies {unknown} are not supported by this model's encodings; choose from {supported}")
    return strategies


def set_strategy(model: torch.nn.Module, strategy: str) -> None:
    """Switch every encoding that supports ``strategy``; others keep their own."""
    for enc in model_encodings(model):
        if strategy in type(enc).strategies:
            enc.strategy = strategy


@torch.no_grad()
def evaluate(model: Any, loader: Any, evaluator: Evaluator) -> dict[str, float]:
    """One pass over ``loader`` with model.test_step; returns the evaluator's metrics."""
    for batch in loader:
        evaluator.process(data_samples=model.test_step(batch), data_batch=batch)
    return evaluator.evaluate(len(loader.dataset))


@torch.no_grad()
def rank_classes(
    results: list[dict[str, Any]],
    key: str,
    names: Sequence[str],
    topk: int,
    batch_size: int,
    logits: Callable[[list[Any]], torch.Tensor],
) -> list[dict[str, Any]]:
    """Give every result holding a sample under ``key`` its ``'top'`` ``topk`` (class, probability) pairs, batched
    through ``logits``, and drop the sample; ValueError when the outputs and the class names differ in number."""
    good = [r for r in results if key in r]
    for start in range(0, len(good), batch_size):
        chunk = good[start : start + batch_size]
        probs = logits([r.pop(key) for r in chunk]).float().softmax(-1)
        if probs.shape[-1] != len(names):
            raise ValueError(f'the model has {probs.shape[-1]} outputs but {len(names)} class names are known')
        top = probs.topk(min(topk, probs.shape[-1]), dim=-1)
        for result, values, index in zip(chunk, top.values.tolist(), top.indices.tolist()):
            result['top'] = [(names[i], float(p)) for p, i in zip(values, index)]
    return results


def settings_loader(cfg, overrides: Mapping[str, Any], batch_size: int | None = None):
    """The config's test loader with ``overrides`` applied to its data set (and another batch size when given)."""
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.dataset.update(dict(overrides))
    if batch_size is not None:
        loader_cfg.batch_size = int(batch_size)
    return Runner.build_dataloader(loader_cfg, seed=0)


def resize_setting(cfg, resize: str | None) -> dict[str, str]:
    """``{'resize': mode}`` for a test set of image files, {} for one drawing sizes itself (then ``resize`` raises)."""
    dataset = cfg.test_dataloader.dataset
    kind = dataset.get('type')
    cls = DATASETS.get(kind) if isinstance(kind, str) else kind
    if cls is None or 'resize' not in inspect.signature(cls).parameters:
        if resize is not None:
            raise ValueError(
                f'--resize {resize}: the test set ({getattr(cls, "__name__", kind)}) renders each size itself, with '
                'no image to resize; leave --resize out'
            )
        return {}
    return {'resize': check_resize(resize or dataset.get('resize', 'crop'))}


__all__ = [
    'Resolution',
    'available_strategies',
    'DEFAULT_ASPECTS',
    'DEFAULT_SCALES',
    'build_model',
    'check_resolutions',
    'check_strategies',
    'default_resolutions',
    'encoding_label',
    'evaluate',
    'load_model',
    'model_encodings',
    'model_patch_size',
    'parse_resolution',
    'rank_classes',
    'resize_setting',
    'resolution_label',
    'set_strategy',
    'settings_loader',
    'train_resolution',
    'trained_config',
    'training_record',
    'training_setting',
]
