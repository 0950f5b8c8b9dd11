"""Misspelled keys in the config sections mmengine builds, refused at load, naming the closest valid key.

Each section is checked against the signature of the class its ``type`` names (or mmengine's default); targets that
forward ``**kwargs`` out of sight, or types that do not resolve, are skipped.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from mmengine.hooks import CheckpointHook
from mmengine.runner import Runner

from vispe import registry as reg
from vispe.engine.config_files import ConfigError

#: config keys that are not constructor arguments
_META = frozenset({'type', '_scope_', '_delete_'})
#: keys mmengine's Runner reads from a data loader config itself, before building torch's DataLoader
_LOADER_EXTRAS = frozenset({'num_batch_per_epoch', 'disable_subprocess_warning'})
#: classes whose ``**kwargs`` can take nothing: CheckpointHook hands them to Runner.save_checkpoint, beside every
#: argument that takes (a typo there would fail at the first checkpoint, an epoch into the run)
_CLOSED_KWARGS = (CheckpointHook,)
#: keys mmengine's optimizer-wrapper builder reads from ``optim_wrapper`` before building the wrapper
_WRAPPER_EXTRAS = frozenset({'constructor', 'paramwise_cfg'})


def check_section_keys(cfg: Mapping[str, Any]) -> None:
    """ConfigError for the first key of a Runner section that its constructor does not take."""
    for split, loop in (('train', None), ('val', 'ValLoop'), ('test', 'TestLoop')):
        _check_loop(cfg.get(f'{split}_cfg'), f'{split}_cfg', loop)
        _check_loader(cfg.get(f'{split}_dataloader'), f'{split}_dataloader')
        _check_evaluator(cfg.get(f'{split}_evaluator'), f'{split}_evaluator')
    _check_optim_wrapper(cfg.get('optim_wrapper'))
    randomness = cfg.get('randomness')
    if isinstance(randomness, Mapping):
        _check(Runner.set_randomness, randomness, 'randomness', 'Runner.set_randomness', supplied={'self'})
    _check_entries(cfg.get('param_scheduler'), 'param_scheduler', reg.PARAM_SCHEDULERS,
                   extra={'convert_to_iter_based'}, supplied={'optimizer', 'param_name'})  # fmt: skip
    hooks = cfg.get('default_hooks')
    if isinstance(hooks, Mapping):
        for name, hook in hooks.items():
            _check_entries(hook, f'default_hooks.{name}', reg.HOOKS, extra={'priority'})
    _check_entries(cfg.get('custom_hooks'), 'custom_hooks', reg.HOOKS, extra={'priority'})
    log_processor = cfg.get('log_processor')
    if isinstance(log_processor, Mapping):
        _check_typed(log_processor, 'log_processor', reg.LOG_PROCESSORS, default='LogProcessor')


def _resolve(registry: Any, type_: Any) -> Callable | None:
    if isinstance(type_, str):
        try:
            target = registry.get(type_)
        except Exception:  # a scope that does not import, a malformed name: mmengine reports it when it builds
            return None
        return target if callable(target) else None
    return type_ if callable(type_) else None


def _check(
    target: Callable | None,
    node: Mapping[str, Any],
    path: str,
    owner: str,
    extra: Iterable[str] = (),
    supplied: Iterable[str] = (),
) -> None:
    """ConfigError for the first key of ``node`` that ``target`` does not take (``extra``: read by the builder;
    ``supplied``: passed by the Runner)."""
    if target is None:
        return
    accepted = _accepted(target)
    if accepted is None:
        return
    allowed = accepted | set(extra)
    for key in node:
        if key in allowed or key in _META:
            continue
        valid = sorted(allowed - set(supplied) - {'self'})
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise ConfigError(
            f'{path}.{key}: {owner} takes no argument {key!r}{hint} (it takes {", ".join(valid) or "no arguments"})'
        )


def _accepted(target: Callable) -> set[str] | None:
    """The arguments ``target`` takes; a class without its own ``__init__`` takes none, ``_CLOSED_KWARGS`` ones only
    what their chain names."""
    if isinstance(target, type):
        if all('__init__' not in vars(cls) for cls in target.__mro__[:-1]):  # only object's
            return set()
        if issubclass(target, _CLOSED_KWARGS):
            return {
                p.name
                for cls in target.__mro__
                if '__init__' in vars(cls) and cls is not object
                for p in inspect.signature(vars(cls)['__init__']).parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != 'self'
            }
    return reg.accepted_arguments(target)


def _check_typed(node: Any, path: str, registry: Any, default: Any = None, **kwargs: Any) -> None:
    if not isinstance(node, Mapping):
        return
    type_ = node.get('type', default)
    target = _resolve(registry, type_)
    owner = type_ if isinstance(type_, str) else getattr(target, '__name__', repr(target))
    _check(target, node, path, str(owner), **kwargs)


def _check_entries(node: Any, path: str, registry: Any, **kwargs: Any) -> None:
    if isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            _check_typed(item, f'{path}[{i}]', registry, **kwargs)
    else:
        _check_typed(node, path, registry, **kwargs)


def _check_loop(node: Any, path: str, default: str | None) -> None:
    if not isinstance(node, Mapping):
        return
    if default is None and 'type' not in node:  # mmengine picks the training loop by ``by_epoch``
        default = 'EpochBasedTrainLoop' if node.get('by_epoch', 'max_iters' not in node) else 'IterBasedTrainLoop'
        node = {k: v for k, v in node.items() if k != 'by_epoch'}
    _check_typed(node, path, reg.LOOPS, default=default, supplied={'runner', 'dataloader', 'evaluator'})


def _check_loader(node: Any, path: str) -> None:
    if not isinstance(node, Mapping):
        return
    _check(torch.utils.data.DataLoader, node, path, 'DataLoader', extra=_LOADER_EXTRAS)
    _check_typed(node.get('dataset'), f'{path}.dataset', reg.DATASETS)
    _check_typed(node.get('sampler'), f'{path}.sampler', reg.DATA_SAMPLERS, supplied={'dataset', 'seed'})
    _check_typed(node.get('batch_sampler'), f'{path}.batch_sampler', reg.DATA_SAMPLERS,
                 supplied={'sampler', 'batch_size'})  # fmt: skip
    collate = node.get('collate_fn')
    if isinstance(collate, Mapping):
        target = _resolve(reg.FUNCTIONS, collate.get('type'))
        if target is not None:
            _check(target, collate, f'{path}.collate_fn', str(collate.get('type')), supplied={'data_batch', 'batch'})


def _check_evaluator(node: Any, path: str) -> None:
    if isinstance(node, Mapping) and _resolve(reg.EVALUATOR, node.get('type')) is not None:
        _check_typed(node, path, reg.EVALUATOR)
        _check_entries(node.get('metrics'), f'{path}.metrics', reg.METRICS)
    else:
        _check_entries(node, path, reg.METRICS)


def _check_optim_wrapper(node: Any) -> None:
    if not isinstance(node, Mapping):
        return
    if 'type' in node or 'optimizer' in node:  # a dict of wrappers (one per model part) has neither
        _check_typed(node, 'optim_wrapper', reg.OPTIM_WRAPPERS, default='OptimWrapper', extra=_WRAPPER_EXTRAS)
    _check_typed(node.get('optimizer'), 'optim_wrapper.optimizer', reg.OPTIMIZERS, supplied={'params'})
