"""A run's config as data: what a checkpoint records of it, read back without running anything.

mmengine keeps the config in a checkpoint as Python text (``meta['cfg']``), which only running it can read; vispe also
records it as JSON (``meta['vispe_config']``), whose class names must be registered names (mmengine's registry would
import any other dotted name). ``meta['cfg']`` is never read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mmengine import registry as mm
from mmengine.config import Config
from mmengine.registry import Registry

from vispe.engine.config_files import ConfigError

#: the checkpoint meta key of the JSON record
RECORD_KEY = 'vispe_config'
#: the record's format tag, checked on reading
RECORD_FORMAT = 'vispe-config/1'
#: config keys whose string value names a class or function that mmengine looks up in a registry
CLASS_KEYS = ('type', 'constructor', 'runner_type')
#: scopes a recorded class name may carry ('vispe.mixed_size_collate')
SCOPES = ('vispe', 'mmengine')


def _encode(value: Any, where: str) -> Any:
    """``value`` as JSON, tuples and non-string keys tagged, anything that is not data as a marker reading refuses."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _encode(v, f'{where}.{k}') for k, v in value.items()}
        return {'__items__': [[_encode(k, where), _encode(v, f'{where}[{k!r}]')] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {'__tuple__': [_encode(v, f'{where}[{i}]') for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f'{where}[{i}]') for i, v in enumerate(value)]
    return {'__not_data__': f'{where.lstrip(".")}: {type(value).__name__}'}


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if '__tuple__' in value:
        return tuple(_decode(v) for v in value['__tuple__'])
    if '__items__' in value:
        return {_decode(k): _decode(v) for k, v in value['__items__']}
    if '__not_data__' in value:
        raise ConfigError(f'holds a value that is not data ({value["__not_data__"]})')
    return {k: _decode(v) for k, v in value.items()}


def config_record(cfg: Config) -> str:
    """The JSON text a checkpoint records of the resolved ``cfg``."""
    return json.dumps({'format': RECORD_FORMAT, 'config': _encode(cfg.to_dict(), '')}, sort_keys=True)


def registered_names() -> set[str]:
    """Every name held by mmengine's root registries, vispe's own and their children."""
    import vispe.registry

    names: set[str] = set()

    def walk(registry: Registry) -> None:
        registry.import_from_location()
        names.update(registry.module_dict)
        for child in registry._children.values():  # mmengine exposes no public accessor for a node's children
            walk(child)

    for registry in [*vars(mm).values(), *vars(vispe.registry).values()]:
        if isinstance(registry, Registry):
            walk(registry)
    return names


def unregistered_classes(node: Any, names: set[str], where: str = '') -> list[str]:
    """'key=value' for every class name in ``node`` that no registry holds (bare or in ``SCOPES``)."""
    found = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f'{where}.{key}' if where else str(key)
            if key in CLASS_KEYS and value is not None:
                scope, _, name = value.rpartition('.') if isinstance(value, str) else ('', '', '')
                if not isinstance(value, str) or (scope and scope not in SCOPES) or name not in names:
                    found.append(f'{path}={value!r}')
            else:
                found += unregistered_classes(value, names, path)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            found += unregistered_classes(value, names, f'{where}[{i}]')
    return found


def config_from_record(text: str) -> Config:
    """The config a record holds; ``ConfigError`` for one that is not a record, names an unregistered class, imports
    modules or sets another scope."""
    try:
        record = json.loads(text)
    except (TypeError, ValueError) as err:
        raise ConfigError(f'holds a config record that is not JSON ({err})') from None
    if (
        not isinstance(record, dict)
        or record.get('format') != RECORD_FORMAT
        or not isinstance(record.get('config'), dict)
    ):
        raise ConfigError(f'holds a config record of an unknown format (expected {RECORD_FORMAT!r})')
    try:
        data = _decode(record['config'])
    except (TypeError, KeyError, ValueError) as err:  # ConfigError is a ValueError: keep its message
        raise err if isinstance(err, ConfigError) else ConfigError(f'holds a malformed config record ({err})') from None
    if 'custom_imports' in data:
        raise ConfigError('holds a config that imports modules (custom_imports), which a recorded config may not')
    if data.get('default_scope') not in (None, *SCOPES):
        raise ConfigError(f'holds a config of another default scope ({data["default_scope"]!r})')
    unknown = unregistered_classes(data, registered_names())
    if unknown:
        raise ConfigError(
            f'holds a config naming classes that no vispe or mmengine registry holds ({", ".join(unknown[:3])}), '
            'which mmengine would import'
        )
    try:
        return Config(data)
    except (TypeError, KeyError, ValueError) as err:  # a reserved key, a value mmengine's ConfigDict refuses
        raise ConfigError(f'holds a config mmengine cannot read ({err})') from None


def _meta(ckpt: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = ckpt.get('meta')
    return meta if isinstance(meta, Mapping) else {}


def recorded_config(ckpt: Mapping[str, Any], path: str, instead: str) -> Config:
    """The config ``ckpt`` records, read as data; ``ConfigError``, ending with ``instead``, when it records none."""
    meta = _meta(ckpt)
    text = meta.get(RECORD_KEY)
    if isinstance(text, str):
        try:
            return config_from_record(text)
        except ConfigError as err:
            raise ConfigError(f'{path} {err}; {instead}') from None
    if isinstance(meta.get('cfg'), str):
        raise ConfigError(
            f'{path} records its config only as Python text (a checkpoint saved before vispe recorded configs as '
            f'data, or by another tool), and vispe runs no code read from a checkpoint; {instead}'
        )
    raise ConfigError(f'{path} records no training config; {instead}')


def recorded_config_or_none(ckpt: Mapping[str, Any]) -> Config | None:
    """``recorded_config``, or None where the checkpoint records none that reads as data."""
    text = _meta(ckpt).get(RECORD_KEY)
    if not isinstance(text, str):
        return None
    try:
        return config_from_record(text)
    except ConfigError:
        return None


__all__ = [
    'CLASS_KEYS',
    'RECORD_FORMAT',
    'RECORD_KEY',
    'config_from_record',
    'config_record',
    'recorded_config',
    'recorded_config_or_none',
    'registered_names',
    'unregistered_classes',
]
