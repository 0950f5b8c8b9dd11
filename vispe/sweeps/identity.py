"""What a sweep's results depend on, which a rerun into the same folder must match (``sweep_identity``): the sweep's
kind, the checkpoint's sha256, the resolved config, the data on disk (``data_fingerprint``), the vispe and torch
versions, and the sweep's own settings."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch

from vispe.engine.config import differing_keys, flat_config
from vispe.files import sha256

Row = dict[str, Any]

#: top-level config keys that only steer training runs (logging, hooks, where to write); they never change an
#: evaluation, so they are left out of the config identity
RUNTIME_KEYS = frozenset(
    {'work_dir', 'default_hooks', 'custom_hooks', 'log_processor', 'log_level', 'visualizer', 'resume', 'load_from'}
)


def resolved_config(cfg) -> Row:
    """The config after --cfg-options as {dotted key: JSON value}, runtime-only keys left out."""
    flat = flat_config({k: v for k, v in cfg.to_dict().items() if k not in RUNTIME_KEYS})
    return {key: jsonable(value) for key, value in flat.items()}


def file_sha256(path: str) -> str:
    """The sha256 of a file's content."""
    return sha256(path)


def sweep_identity(kind: str, cfg, checkpoint: str, **extra: Any) -> Row:
    """What a rerun into the same folder must match (module doc); ``extra``: sweep settings that change its numbers."""
    from vispe import __version__

    config = resolved_config(cfg)
    text = json.dumps(config, sort_keys=True)
    return {
        'sweep': kind,
        'checkpoint_sha256': file_sha256(checkpoint),
        'config_sha256': hashlib.sha256(text.encode()).hexdigest(),
        'data_fingerprint': data_fingerprint(config),
        'versions': f'vispe {__version__}, torch {torch.__version__.split("+")[0]}',
        **{k: jsonable(v) for k, v in extra.items()},
        'resolved_config': config,
    }


def jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, unknown objects their repr)."""
    return json.loads(json.dumps(value, default=repr))


def _short(value: Any, width: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + '...'


def config_differences(old: Row, new: Row, shown: int = 3) -> str:
    """'test_dataloader.dataset.seed: 0, now 1; ...' for the first ``shown`` keys whose values differ."""
    keys = differing_keys(old, new)
    parts = [f'{k}: {_short(old.get(k, "<unset>"))}, now {_short(new.get(k, "<unset>"))}' for k in keys[:shown]]
    more = f'; and {len(keys) - shown} more' if len(keys) > shown else ''
    return '; '.join(parts) + more if parts else 'the resolved configs differ'


def data_fingerprint(config: Row) -> str | None:
    """sha256 over (path, size, mtime) of every file below the val and test data sets' ``data_root`` (None if none)."""
    roots = sorted({str(v) for k, v in config.items() if k.startswith(('val_', 'test_')) and k.endswith('.data_root')})
    if not roots:
        return None
    digest = hashlib.sha256()
    for root in roots:
        digest.update(f'root {root}\n'.encode())
        if os.path.isfile(root):
            stat = os.stat(root)
            digest.update(f'{stat.st_size} {stat.st_mtime_ns}\n'.encode())
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                stat = os.stat(os.path.join(folder, name))
                rel = os.path.relpath(os.path.join(folder, name), root)
                digest.update(f'{rel} {stat.st_size} {stat.st_mtime_ns}\n'.encode())
    return digest.hexdigest()


def describe_difference(key: str, old: Row, new: Row) -> str:
    """What one identity key of an earlier results file (``old``) says against this sweep's (``new``)."""
    if key not in old:
        return f'results that do not record their {key} (written by an older vispe)'
    if key == 'data_fingerprint':
        return 'data that changed since (files below data_root were added, removed or modified)'
    if key == 'sweep':
        return f'another sweep ({old.get("sweep")}, not {new["sweep"]})'
    if key == 'checkpoint_sha256':
        name = os.path.basename(str(old.get('checkpoint', '?')))
        return f'another checkpoint ({name}, sha256 {str(old.get(key))[:12]}; this one is {new[key][:12]})'
    if key == 'config_sha256':
        return f'another config ({config_differences(old.get("resolved_config") or {}, new["resolved_config"])})'
    return f'another {key} ({_short(old.get(key))}, now {_short(new[key])})'


__all__ = [
    'RUNTIME_KEYS',
    'config_differences',
    'data_fingerprint',
    'describe_difference',
    'jsonable',
    'file_sha256',
    'resolved_config',
    'sweep_identity',
]
