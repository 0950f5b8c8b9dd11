"""A trained checkpoint as an evaluable model, the toolkit every sweep builds on: load it, label it, read the
resolution it was trained at, list and switch its encodings' resolution strategies, evaluate it on a loader."""

from __future__ import annotations

import copy
import inspect
import json
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope

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
    """The sweep eval_resolution runs when given no ``--resolutions``: ``scales`` x the training size, then the
    ``aspects`` (height / width) at the training token count.

    A scaled side is rounded to the nearest multiple of the patch (halves up), at least one patch: 0.5x of 32 px
    with 4 px patches is 16 px, 0.5x of 36 px with 8 px patches 16 px (0.44x), not 18 px, which the patch grid
    cannot take. An aspect a at N training tokens has its short side round(sqrt(N / a)) tokens for a >= 1
    (round(sqrt(N a)) for a < 1) and its long side round(N / short), so the token count stays within half a short
    side of N: 8x8 = 64 tokens (32 px, patch 4) give 11x6 = 66 tokens (44x24 px) and 6x11 (24x44 px). A square
    training size gives int resolutions, a non-square one (H, W); a size that rounds onto an earlier one is listed
    once.
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
    """The (height, width) patch size of the model's backbone (a timm ViT's ``patch_embed.patch_size``)."""
    backbone = getattr(model, 'backbone', model)
    size = getattr(getattr(backbone, 'patch_embed', None), 'patch_size', None)
    if size is None:
        raise ValueError(
            f'{type(backbone).__name__} has no patch_embed.patch_size to round the default resolutions to; '
            'pass the resolutions (--resolutions 16 32 48x24)'
        )
    return _hw(size if isinstance(size, int) else tuple(size))


def check_resolutions(model: torch.nn.Module, resolutions: Sequence[Resolution]) -> None:
    """ValueError naming every one of ``resolutions`` the model's patch does not divide, before a sweep evaluates
    any (a sweep would otherwise stop at the first such cell, after the cells before it). Nothing for a model with
    no patch size to check against."""
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
    """``run_meta.trained_on``: the checkpoint's ``meta`` (RunMetaHook records it), else the config's training data
    set (what a --cfg-options override changes), else the config's top-level ``key``; a ValueError naming where it
    looked for the training ``what`` when none has it."""
    value = trained_on(cfg, meta, key)
    if value is None:
        raise ValueError(
            f'neither the checkpoint meta nor the config (train_dataloader.dataset.{META_KEYS[key]}, {key}) gives '
            f'the training {what}'
        )
    return value


def train_resolution(cfg: Any, meta: dict | None = None) -> Resolution:
    """The resolution the model was trained at (``training_setting``: meta, data set image_size, config)."""
    return training_setting(cfg, meta, 'train_resolution', 'resolution')


def training_record(cfg: Any, meta: dict | None) -> dict[str, Any]:
    """What a results.json says the model trained on: ``{'train_resolution': size}``, or for a run on several sizes
    ``{'train_resolution': None, 'train_sizes': policy}`` (``run_meta.trained_sizes``)."""
    sizes = trained_sizes(cfg, meta)
    if sizes:
        return {'train_resolution': None, 'train_sizes': sizes}
    return {'train_resolution': train_resolution(cfg, meta)}


def label_by_checkpoint(cfg: Any, meta: dict | None) -> None:
    """Make the val and test data sets of ``cfg`` label by the class names the checkpoint trained on (its
    ``dataset_meta['classes']``, which mmengine saves), where their type takes ``classes`` (ImageFolderDataset) and
    the config does not set them: a label then means the class of that name, whatever the folders' order."""
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
    """(the config's model with the checkpoint's weights, on ``device``, in eval mode; the checkpoint's meta). The
    checkpoint must fit the model key for key, unless the config says ``load_strict = False`` (``--non-strict``).
    Its encodings' training grid follows what the checkpoint records (``run_meta.align_training_grid``, said in a
    warning where it differs from the config's model), and the config's val and test data sets label by the class
    names it trained on (``label_by_checkpoint``)."""
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
    """The model's encodings as a row label: 'rope_mixed', 'ape_learned+rope_axial', or 'none'; with the options
    that change them ('ape_learned:lape=True') where the checkpoint's ``meta`` records its config and that config's
    encodings are the model's. The strategy is left out: each cell says its own."""
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
    """``{'trained_config': {dotted key: value}}``: the model and training-data entries of the config the checkpoint
    records, for a results header, whose title then describes the run (``report.describe``) rather than the config it
    is evaluated with; {} for a checkpoint that records none."""
    recorded = recorded_config_or_none({'meta': meta or {}})
    if recorded is None:
        return {}
    flat = flat_config({k: recorded.get(k) for k in ('model', 'train_dataloader') if recorded.get(k) is not None})
    return {'trained_config': json.loads(json.dumps(flat, default=repr))}


def _accepts(enc: Encoding, strategy: str) -> bool:
    """Whether ``enc`` takes ``strategy`` as it is built (a rotary encoding without a training grid, e.g. after a
    run on several sizes, takes 'none' only); its own strategy is left as it was."""
    current = enc.strategy
    try:
        enc.strategy = strategy
    except ValueError:
        return False
    finally:
        enc.strategy = current
    return True


def available_strategies(model: torch.nn.Module, opt_in: bool = False) -> list[str]:
    """Resolution strategies the model's encodings support and accept (``_accepts``), defaults first; ['default']
    when none do. What a sweep runs by default: an encoding's ``opt_in_strategies`` only with ``opt_in`` or when
    the encoding is set to it (a config's ``strategy='grid_sample'``)."""
    seen: list[str] = []
    for enc in model_encodings(model):
        for s in type(enc).strategies:
            wanted = opt_in or s not in type(enc).opt_in_strategies or s == enc.strategy  # its own, if set
            if s not in seen and wanted and _accepts(enc, s):
                seen.append(s)
    return seen or ['default']


def check_strategies(model: torch.nn.Module, strategies: Sequence[str] | None) -> list[str]:
    """``strategies`` (opt-in ones included), or every one the model supports but those; ValueError naming the
    supported ones for others (and, for a strategy the encodings refuse without a training grid, why)."""
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
    """The inference tools' classification: every result holding a prepared sample under ``key`` gets ``'top'``,
    its ``topk`` (class name, probability) pairs, the samples going ``batch_size`` at a time through ``logits``
    (list of samples -> (n, classes)); the sample is dropped from its result. ValueError when the model's outputs
    and the class names differ in number."""
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
    'resolution_label',
    'set_strategy',
    'train_resolution',
    'trained_config',
    'training_record',
    'training_setting',
]
