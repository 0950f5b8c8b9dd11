"""Config loading for the tools: --cfg-options, device-aware defaults, and typo checks mmengine lacks."""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import inspect
import numbers
import os.path as osp
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch
from mmengine.config import Config, DictAction
from mmengine.runner import Runner

from vispe.engine.config_files import ConfigError, read_config_file, resolve_config
from vispe.engine.config_keys import check_section_keys
from vispe.engine.config_overrides import read_with_options
from vispe.engine.workdir import out_folder
from vispe.registry import MODELS, check_arguments, closest

# Top-level keys Runner.from_cfg reads, plus the ones vispe's tools read.
RUNNER_KEYS = frozenset(p for p in inspect.signature(Runner.__init__).parameters if p not in ('self', 'cfg'))
#: the default hooks mmengine's Runner registers by itself (Runner.register_default_hooks)
MMENGINE_DEFAULT_HOOKS = frozenset({'runtime_info', 'timer', 'sampler_seed', 'logger', 'param_scheduler', 'checkpoint'})
#: top-level keys vispe reads: helpers of the configs, VispeRunner's switches (load_strict, overwrite_work_dir), what
#: the evaluations read when a checkpoint does not record it (train_resolution, train_points, train_frames), the
#: sweeps' settings, and what mmengine's Runner reads beside its arguments (compile, model_wrapper_cfg)
VISPE_KEYS = frozenset({
    'train_resolution', 'custom_imports', 'max_epochs', 'runner_type', 'load_strict', 'overwrite_work_dir',
    'train_points', 'train_frames', 'generation_eval', 'point_eval', 'camera_eval', 'compile', 'model_wrapper_cfg',
})  # fmt: skip


def check_config(cfg: Config) -> None:
    """Reject top-level keys that look like typos of the Runner's, misspelled model arguments, and keys the Runner's
    sections do not take; other top-level keys (helper variables) pass."""
    known = sorted(RUNNER_KEYS | VISPE_KEYS)
    for key in cfg.keys():
        if key in RUNNER_KEYS or key in VISPE_KEYS:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        if close:
            raise ConfigError(
                f'config key {key!r} is not read by the Runner and would be silently ignored; '
                f'did you mean {close[0]!r}?'
            )
    if 'model' not in cfg:
        raise ConfigError("config has no 'model'; inherit one from configs/_base_/models/ or define model=dict(...)")
    check_model_arguments(cfg.model)
    check_section_keys(cfg)


def check_model_arguments(node, path: str = 'model') -> None:
    """Reject misspelled arguments in every registered-model dict of a model config, naming where it sits, before
    anything is built."""
    if isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            check_model_arguments(item, f'{path}[{i}]')
        return
    if not isinstance(node, dict):
        return
    target = MODELS.get(node['type']) if isinstance(node.get('type'), str) else None
    if target is not None:
        try:
            check_arguments(target, node.keys(), node['type'])
        except TypeError as err:
            raise ConfigError(f'{path}: {err}') from None
    for key, value in node.items():
        check_model_arguments(value, f'{path}.{key}')


def drop_disabled_hooks(cfg: Config) -> None:
    """Remove the ``default_hooks`` entries set to None that are not mmengine's own (mmengine asserts on those)."""
    hooks = cfg.get('default_hooks') or {}
    for name in [n for n, hook in hooks.items() if hook is None and n not in MMENGINE_DEFAULT_HOOKS]:
        hooks.pop(name)


def load_config(path: str, cfg_options: dict | None = None, work_dir: str | None = None) -> Config:
    """Config.fromfile (a file or a shipped config name) + --cfg-options + checks; work_dir defaults to
    work_dirs/<config name>."""
    resolved = resolve_config(path)
    # an option on a variable the config's code reads is applied where the variable is defined (config_overrides)
    cfg, applied = read_with_options(resolved, cfg_options) if cfg_options else (read_config_file(resolved), set())
    if cfg_options:
        apply_options(cfg, cfg_options, applied)
    check_config(cfg)
    check_values(cfg)
    drop_disabled_hooks(cfg)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(path))[0])
    return cfg


def apply_options(cfg: Config, options: dict, applied: set[str] | frozenset[str] = frozenset()) -> None:
    """``--cfg-options`` into ``cfg``: checked, encoding names promoted to dicts, merged."""
    check_options_read(cfg, options, applied)
    promote_encoding_names(cfg, options)
    merge_options(cfg, options)


def check_options_read(cfg: Config, options: Mapping[str, Any], applied: set[str] | frozenset[str]) -> None:
    """ConfigError, naming keys that would work, for a ``--cfg-options`` key nothing would read (not a Runner or vispe
    key, nor a variable in ``applied``)."""
    for key in options:
        root = key.split('.')[0]
        if root in RUNNER_KEYS or root in VISPE_KEYS or key in applied:
            continue
        last = key.split('.')[-1]
        flat = [k for k in flat_config(cfg) if k.split('.')[0] in RUNNER_KEYS | VISPE_KEYS]
        matches = [k for k in flat if k.split('.')[-1] == last][:4]
        what = 'a helper value that no part of the config reads' if root in cfg else 'no key of this config'
        hint = f'; set {" or ".join(matches)}' if matches else closest(root, sorted({k.split('.')[0] for k in flat}))
        raise ConfigError(f'--cfg-options {key}: {root!r} is {what}, so the run would go on with its old values{hint}')


def promote_encoding_names(cfg: Config, options: dict) -> None:
    """An encoding given by name becomes ``dict(type=name)`` where a dotted option sets one of its arguments."""
    for key in options:
        parts = key.split('.')
        for j in (j for j, part in enumerate(parts[:-1]) if part == 'encoding'):
            parent: Any = cfg
            for part in parts[:j]:
                parent = parent.get(part) if isinstance(parent, (Config, Mapping)) else None
            if isinstance(parent, MutableMapping) and isinstance(parent.get('encoding'), str):
                parent['encoding'] = {'type': parent['encoding']}


def merge_options(cfg: Config, options: dict) -> None:
    """Merge ``--cfg-options`` into ``cfg``, each dict value replacing what the config holds there."""
    cfg.merge_from_dict(replacing_dicts(options))
    for key in options:
        node: Any = cfg
        for part in key.split('.'):
            node = node.get(part) if isinstance(node, (Config, Mapping)) else None
        _drop_markers(node)


def _drop_markers(node: Any) -> None:
    if isinstance(node, MutableMapping):
        node.pop('_delete_', None)
        for value in node.values():
            _drop_markers(value)


def replacing_dicts(options: dict) -> dict:
    """``--cfg-options`` with every dict value marked ``_delete_``: a dict literal is the whole new value."""
    return {key: _replacing(value) for key, value in options.items()}


def _replacing(value: Any) -> Any:
    # a list replaces the config's list whole (mmengine merges dicts only), so its items stay as given: a
    # ``_delete_`` inside one would reach the constructor it configures
    return {**value, '_delete_': True} if isinstance(value, dict) else value


def _positive_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > 0


def check_values(cfg: Config) -> None:
    """ConfigError for non-positive batch sizes and run lengths, or a negative learning rate or weight decay, before the
    Runner sets up."""
    for split in ('train', 'val', 'test'):
        loader = cfg.get(f'{split}_dataloader')
        if isinstance(loader, dict) and 'batch_size' in loader and not _positive_int(loader['batch_size']):
            raise ConfigError(
                f'{split}_dataloader.batch_size = {loader["batch_size"]!r}: a batch size is a positive integer '
                f'(--cfg-options {split}_dataloader.batch_size=32)'
            )
    train_cfg = cfg.get('train_cfg')
    if isinstance(train_cfg, dict):
        for key in ('max_epochs', 'max_iters', 'val_interval'):
            if key in train_cfg and not _positive_int(train_cfg[key]):
                raise ConfigError(
                    f'train_cfg.{key} = {train_cfg[key]!r}: it must be a positive integer (a run of '
                    f'{train_cfg[key]!r} would train nothing and save nothing); e.g. --cfg-options train_cfg.{key}=5'
                )
    optim = cfg.get('optim_wrapper')
    optimizer = optim.get('optimizer') if isinstance(optim, dict) else None
    if isinstance(optimizer, dict):
        for key, allow_zero in (('lr', False), ('weight_decay', True)):
            value = optimizer.get(key)
            if value is None:
                continue
            bad = (
                not isinstance(value, numbers.Real)
                or isinstance(value, bool)
                or value < 0
                or (value == 0 and not allow_zero)
            )
            if bad:
                need = 'a non-negative number' if allow_zero else 'a positive number'
                raise ConfigError(
                    f'optim_wrapper.optimizer.{key} = {value!r}: it must be {need} (e.g. --cfg-options '
                    f'optim_wrapper.optimizer.{key}={1e-3 if key == "lr" else 0.05})'
                )


def flat_config(node: Any, prefix: str = '') -> dict[str, Any]:
    """{dotted key: leaf value} of a nest of dicts and lists (``param_scheduler.1.end``); empty ones are leaves."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                walk(value, f'{prefix}.{key}' if prefix else str(key))
        elif isinstance(node, (list, tuple)) and node:
            for i, value in enumerate(node):
                walk(value, f'{prefix}.{i}' if prefix else str(i))
        else:
            flat[prefix] = node

    walk(node.to_dict() if hasattr(node, 'to_dict') else node, prefix)
    return flat


_UNSET = object()


def differing_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys of two flat configs whose values differ (or that one lacks), in order of appearance."""
    return [k for k in dict.fromkeys([*old, *new]) if old.get(k, _UNSET) != new.get(k, _UNSET)]


def setup_distributed_backend(cfg: Config) -> None:
    """nccl on GPU, gloo on CPU, unless the config chose one."""
    env = cfg.setdefault('env_cfg', {})
    dist_cfg = env.setdefault('dist_cfg', {})
    dist_cfg.setdefault('backend', 'nccl' if torch.cuda.is_available() else 'gloo')


def enable_amp(cfg: Config, device: str | None = None) -> None:
    """bf16 autocast for training: AmpOptimWrapper on GPU, BF16OptimWrapper on CPU; other optim_wrapper keys kept."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if cfg.optim_wrapper.get('type', 'OptimWrapper') not in ('OptimWrapper', 'AmpOptimWrapper', 'BF16OptimWrapper'):
        raise ConfigError(
            f'--amp replaces optim_wrapper.type, and this config uses {cfg.optim_wrapper.type!r}; '
            'set its dtype yourself or drop --amp'
        )
    if device.startswith('cuda'):
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.dtype = 'bfloat16'
    else:
        cfg.optim_wrapper.type = 'BF16OptimWrapper'
        cfg.optim_wrapper.pop('dtype', None)


def compile_backbone(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` the backbone in place (``nn.Module.compile``): state-dict keys and checkpoints unchanged."""
    inner = getattr(model, 'module', model)
    backbone = getattr(inner, 'backbone', None)
    if backbone is None:
        raise ConfigError(f'--compile compiles model.backbone, and {type(inner).__name__} has none')
    backbone.compile()
    return model


def without_validation(cfg: Config) -> Config:
    """``cfg`` (the same object) with validation switched off."""
    cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if cfg.get('train_cfg'):
        cfg.train_cfg.pop('val_interval', None)
    return cfg


def parse_option_value(text: str) -> Any:
    """One ``--cfg-options`` value, parsed as mmengine does, but a value holding a ``{...}`` dict is read whole as a
    Python literal."""
    if '{' not in text:
        return DictAction._parse_iterable(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"cannot read {text!r} as a Python literal; quote the dict's keys and strings and the whole value, e.g. "
            "\"model.backbone.encoding={'type': 'rope_axial', 'theta': 10}\""
        ) from None


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` for ``--cfg-options`` that also takes dict values (``parse_option_value``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        options = copy.copy(getattr(namespace, self.dest, None) or {})
        for pair in values if isinstance(values, list) else [values]:
            if '=' not in pair:
                parser.error(f'--cfg-options takes key=value pairs, got {pair!r}')
            key, value = pair.split('=', maxsplit=1)
            try:
                options[key] = parse_option_value(value)
            except ValueError as err:
                parser.error(f'--cfg-options {key}: {err}')
        setattr(namespace, self.dest, options)


class NonStrictAction(argparse.Action):
    """``--non-strict``: the same as ``--cfg-options load_strict=False``."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        options = copy.copy(getattr(namespace, 'cfg_options', None) or {})
        options['load_strict'] = False
        namespace.cfg_options = options


def common_parser_args(parser) -> None:
    parser.add_argument(
        'config',
        help='config file or shipped config name (vispe configs), e.g. vit/vit_tiny_rope_mixed_shapes2d_position.py',
    )
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        default=None,
        help='override config entries, e.g. train_cfg.max_epochs=2 model.backbone.encoding=rope_axial; a dict value '
        "is a quoted Python literal: \"model.backbone.encoding={'type': 'irpe', 'mode': 'bias'}\"",
    )
    parser.add_argument(
        '--non-strict',
        action=NonStrictAction,
        help='load the checkpoint weights that fit the model and list the rest (the same as --cfg-options '
        "load_strict=False); by default a checkpoint that doesn't fit key for key and shape for shape is refused",
    )


def sweep_parser_args(parser) -> None:
    """The arguments the sweep commands take after CONFIG: CKPT, --out, --device and --no-progress."""
    parser.add_argument('checkpoint')
    parser.add_argument('--out', type=out_folder, required=True, help='output folder for results.json and results.png')
    parser.add_argument('--device', default=None, help='cpu or cuda (default: cuda when available)')
    parser.add_argument('--no-progress', action='store_true')


def model_config_error(err: Exception) -> ConfigError:
    """``ConfigError('model: ...')`` carrying the message of an error the model's build raised."""
    message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    return ConfigError(f'model: {message}')


__all__: list[str] = [
    'ConfigError',
    'apply_options',
    'check_config',
    'check_model_arguments',
    'check_options_read',
    'model_config_error',
    'CfgOptionsAction',
    'common_parser_args',
    'compile_backbone',
    'drop_disabled_hooks',
    'differing_keys',
    'enable_amp',
    'flat_config',
    'load_config',
    'parse_option_value',
    'read_config_file',
    'check_values',
    'setup_distributed_backend',
    'sweep_parser_args',
    'without_validation',
]
