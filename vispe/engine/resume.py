"""What a resume must check before anything in the work dir is written (``check_resumable``): a training state, weights
that fit the config's model, matching optimizer groups and schedulers, and the config differences."""

from __future__ import annotations

import copy
import re
from typing import Any

import torch
from mmengine.optim import build_optim_wrapper
from torch import nn

from vispe.engine.checkpoint import CheckpointError, StateMismatch, upgrade_state
from vispe.engine.config import differing_keys, flat_config, model_config_error
from vispe.engine.config_record import recorded_config_or_none
from vispe.registry import MODELS

#: config sections compared between a checkpoint's run and a resuming one
COMPARED = ('model', 'optim_wrapper', 'param_scheduler', 'train_dataloader', 'train_cfg')


def _shown(flat: dict[str, Any], key: str) -> str:
    return repr(flat[key]) if key in flat else 'unset'


def config_differences(ckpt: dict, cfg: Any, sections=COMPARED, first: int = 6) -> list[str]:
    """'key: old (checkpoint's run) -> new (now)' for each setting of ``sections`` that differs from the recorded
    config; [] without a record."""
    saved = recorded_config_or_none(ckpt)
    if saved is None or cfg is None:
        return []
    old = {k: v for section in sections for k, v in flat_config(saved.get(section), section).items()}
    new = {k: v for section in sections for k, v in flat_config(cfg.get(section), section).items()}
    lines = [f"{k}: {_shown(old, k)} (checkpoint's run) -> {_shown(new, k)} (now)" for k in differing_keys(old, new)]
    return lines[:first] + ([f'... {len(lines) - first} more'] if len(lines) > first else [])


def revised(state: dict[str, Any], revise_keys) -> dict[str, Any]:
    """``state`` with each key rewritten by the (pattern, replacement) pairs of ``revise_keys``, in order."""
    for pattern, replacement in revise_keys:
        state = {re.sub(pattern, replacement, k): v for k, v in state.items()}
    return state


def meta_model(model: Any) -> nn.Module:
    """The model a config describes, built on the meta device, or the module itself."""
    if isinstance(model, nn.Module):
        return model
    cfg = copy.deepcopy(dict(model))
    try:
        with torch.device('meta'):
            return MODELS.build(cfg)
    except Exception:  # code that needs real tensors at build time: build it for real without touching the seeds
        try:
            with torch.random.fork_rng(devices=[]):
                return MODELS.build(copy.deepcopy(dict(model)))
        except (ValueError, TypeError, KeyError) as err:
            raise model_config_error(err) from err


def check_resumable(path, ckpt, model, cfg, optim_wrapper, param_scheduler) -> list[str]:
    """CheckpointError, naming what differs, unless ``ckpt`` can be resumed with this Runner's model, optimizer and
    schedulers; else the notices to log."""
    if not has_training_state(ckpt):
        raise CheckpointError(
            f'cannot resume from {path!r}: it holds weights only (no optimizer, message hub or epoch counter: '
            'an exported or model-zoo checkpoint, or one saved with save_optimizer=False); to start a new run '
            f'from these weights, give it as load_from without --resume (--cfg-options load_from={path})'
        )
    problems = []
    built = meta_model(model)
    state = revised(ckpt['state_dict'], [(r'^module\.', '')]) if 'state_dict' in ckpt else {}
    try:
        state = upgrade_state(built, state)
    except ValueError as error:
        problems.append(str(error))
    mismatch = StateMismatch(built.state_dict(), state)
    if mismatch:
        problems.append(f'its weights do not fit the model this config builds: {mismatch.describe()}')
    elif optim_wrapper is not None and 'optimizer' in ckpt:
        problems += optimizer_differences(built, optim_wrapper, ckpt['optimizer'])
    saved_schedulers = ckpt.get('param_schedulers')
    configured = param_scheduler if isinstance(param_scheduler, (list, tuple)) else None
    if isinstance(saved_schedulers, list) and configured is not None and len(saved_schedulers) != len(configured):
        problems.append(
            f'it was saved with {len(saved_schedulers)} parameter scheduler(s) and this config has '
            f'{len(configured)}, so some would restart from scratch'
        )
    differences = config_differences(ckpt, cfg)
    if problems:
        changed = (
            '; the config differs from the one that run was trained with in: ' + '; '.join(differences)
            if differences
            else ''
        )
        raise CheckpointError(
            f'cannot resume from {path!r} with this config: {"; ".join(problems)}{changed}. Nothing in the work '
            "dir was changed. Resume with the run's own config (mmengine saved it in the work dir), or start a "
            'new run in another --work-dir (with load_from set to this checkpoint and --non-strict to reuse the '
            'weights that fit)'
        )
    if differences:
        return [f"resuming {path} with a config that differs from its run's in: " + '; '.join(differences)]
    return []


def has_training_state(ckpt: dict) -> bool:
    """Whether a checkpoint holds what a resume needs: weights, message hub, epoch and iteration counters."""
    meta = ckpt.get('meta') or {}
    return 'message_hub' in ckpt and 'epoch' in meta and 'iter' in meta and 'state_dict' in ckpt


def optimizer_differences(model: nn.Module, optim_wrapper: Any, saved: dict) -> list[str]:
    """How the optimizer groups this config builds differ from a checkpoint's; [] when they match or cannot be built."""
    if not isinstance(optim_wrapper, dict) or not isinstance(saved, dict) or 'param_groups' not in saved:
        return []
    try:
        wrapper = build_optim_wrapper(model, copy.deepcopy(optim_wrapper))
    except Exception:  # e.g. AmpOptimWrapper without a GPU: mmengine's own resume will judge
        return []
    groups = wrapper.optimizer.param_groups
    saved_groups = saved['param_groups']
    if len(groups) != len(saved_groups):
        return [
            f"its optimizer has {len(saved_groups)} parameter groups and this config's has {len(groups)} "
            '(the model, optim_wrapper.constructor or its paramwise_cfg changed)'
        ]
    sizes = [len(g['params']) for g in groups]
    saved_sizes = [len(g['params']) for g in saved_groups]
    if sizes != saved_sizes:
        return ["its optimizer's parameter groups hold other numbers of parameters than this config's"]
    return []


__all__ = [
    'COMPARED',
    'check_resumable',
    'config_differences',
    'has_training_state',
    'meta_model',
    'optimizer_differences',
    'revised',
]
