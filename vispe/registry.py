"""vispe's registries: children of mmengine's root registries, in scope ``vispe``. Each names the package that fills it
(``locations=``), so a config's ``type`` resolves without a prior import. Models built through MODELS have their
config keys checked first: an unknown one is a TypeError naming the closest."""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mmengine import registry as mm
from mmengine.registry import Registry
from mmengine.registry.build_functions import build_model_from_cfg

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
#: config keys that are not constructor arguments
_CONFIG_KEYS = frozenset({'type', '_scope_'})


def closest(name: str, choices: Sequence[str]) -> str:
    """The hint ``; did you mean 'a', 'b'?`` naming the ``choices`` closest to ``name``; '' when none is close."""
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.4)
    return f'; did you mean {", ".join(map(repr, close))}?' if close else ''


def accepted_arguments(target: Callable) -> set[str] | None:
    """The keyword arguments a class or function takes, or None when it forwards ``**kwargs`` where no check can
    follow (``**kwargs`` is followed up a class's bases, and for a function to the class its return type names)."""
    if inspect.isclass(target):
        chain = [vars(cls)['__init__'] for cls in target.__mro__ if '__init__' in vars(cls)]
    else:
        chain = [target]
    names: set[str] = set()
    for fn in chain:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature
            return None
        names |= {p.name for p in params if p.kind in _NAMED} - {'self'}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return names
    if not inspect.isclass(target):
        try:
            returned = typing.get_type_hints(target).get('return')
        except Exception:  # an annotation that does not resolve: nothing to follow
            return None
        if inspect.isclass(returned):
            rest = accepted_arguments(returned)
            return None if rest is None else names | rest
    return None


def check_arguments(target: Callable, keys: Iterable[str], owner: str) -> None:
    """TypeError naming the closest valid argument for each of ``keys`` that ``target`` does not take."""
    accepted = accepted_arguments(target)
    if accepted is None:
        return
    unknown = [k for k in keys if k not in accepted and k not in _CONFIG_KEYS]
    if unknown:
        valid = sorted(accepted)
        hints = '; '.join(f'{k!r}{closest(k, valid)}' for k in unknown)
        raise TypeError(f'{owner} got unknown argument(s) {hints} (valid arguments: {valid})')


def _build_model(cfg: Any, registry: Registry, default_args: dict | None = None) -> Any:
    for one in cfg if isinstance(cfg, list) else [cfg]:
        obj_type = one.get('type') if isinstance(one, dict) else None
        target = registry.get(obj_type) if isinstance(obj_type, str) else obj_type
        if callable(target):
            owner = obj_type if isinstance(obj_type, str) else getattr(target, '__name__', repr(target))
            check_arguments(target, [*one, *(default_args or {})], owner)
    return build_model_from_cfg(cfg, registry, default_args)


ENCODINGS = Registry('encoding', scope='vispe', locations=['vispe.encodings'])
MODELS = Registry(
    'model', parent=mm.MODELS, scope='vispe', locations=['vispe.backbones', 'vispe.tasks'], build_func=_build_model
)
DATASETS = Registry('dataset', parent=mm.DATASETS, scope='vispe', locations=['vispe.datasets'])
TRANSFORMS = Registry('transform', parent=mm.TRANSFORMS, scope='vispe', locations=['vispe.datasets'])
METRICS = Registry('metric', parent=mm.METRICS, scope='vispe', locations=['vispe.engine'])
HOOKS = Registry('hook', parent=mm.HOOKS, scope='vispe', locations=['vispe.engine'])
RUNNERS = Registry('runner', parent=mm.RUNNERS, scope='vispe', locations=['vispe.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor', parent=mm.OPTIM_WRAPPER_CONSTRUCTORS, scope='vispe', locations=['vispe.engine']
)
POSITION_SAMPLERS = Registry('position sampler', scope='vispe', locations=['vispe.positions'])
#: the (H, W) each image is served at in mixed-resolution training (vispe.datasets.sizes)
SIZE_POLICIES = Registry('size policy', scope='vispe', locations=['vispe.datasets.sizes'])

# Children with little or nothing of vispe's own (DATA_SAMPLERS and FUNCTIONS hold vispe.datasets.batching's batch
# sampler and collate): with them, configs in scope 'vispe' find mmengine's optimizers, schedulers, loops, samplers
# and collate functions without mmengine's "failed to search registry" fallback.
LOOPS = Registry('loop', parent=mm.LOOPS, scope='vispe')
OPTIMIZERS = Registry('optimizer', parent=mm.OPTIMIZERS, scope='vispe')
OPTIM_WRAPPERS = Registry('optim_wrapper', parent=mm.OPTIM_WRAPPERS, scope='vispe', locations=['vispe.engine'])
PARAM_SCHEDULERS = Registry('parameter scheduler', parent=mm.PARAM_SCHEDULERS, scope='vispe')
DATA_SAMPLERS = Registry('data sampler', parent=mm.DATA_SAMPLERS, scope='vispe', locations=['vispe.datasets'])
FUNCTIONS = Registry('function', parent=mm.FUNCTIONS, scope='vispe', locations=['vispe.datasets'])
EVALUATOR = Registry('evaluator', parent=mm.EVALUATOR, scope='vispe')
MODEL_WRAPPERS = Registry('model_wrapper', parent=mm.MODEL_WRAPPERS, scope='vispe', locations=['vispe.engine'])
WEIGHT_INITIALIZERS = Registry('weight initializer', parent=mm.WEIGHT_INITIALIZERS, scope='vispe')
VISUALIZERS = Registry('visualizer', parent=mm.VISUALIZERS, scope='vispe')
VISBACKENDS = Registry('vis_backend', parent=mm.VISBACKENDS, scope='vispe')
LOG_PROCESSORS = Registry('log_processor', parent=mm.LOG_PROCESSORS, scope='vispe')
