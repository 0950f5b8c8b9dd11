"""Config files: where vispe's shipped configs are, resolving one by path or name, and reading one with errors that name
the file and line."""

from __future__ import annotations

import ast
import difflib
import os
import os.path as osp
import sys
import traceback

from mmengine.config import Config

from vispe.files import check_file, files_inside


class ConfigError(ValueError):
    """A config that would run, but not as its author meant."""


def _syntax_error_in(path: str, seen: set | None = None) -> tuple[str, SyntaxError] | None:
    """(file, error) of the first of ``path`` and its ``_base_`` files that does not parse; None when all do."""
    seen = seen if seen is not None else set()
    if path in seen or not osp.isfile(path):
        return None
    seen.add(path)
    with open(path, encoding='utf-8') as f:
        text = f.read()
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as err:
        return path, err
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '_base_' for t in node.targets):
            try:
                bases = ast.literal_eval(node.value)
            except ValueError:
                return None
            for base in [bases] if isinstance(bases, str) else bases:
                found = _syntax_error_in(osp.join(osp.dirname(path), base), seen)
                if found:
                    return found
    return None


def read_config_file(path: str) -> Config:
    """``Config.fromfile`` whose failures (syntax, or an exception in the config's code) are one ``ConfigError`` naming
    file and line."""
    try:
        return Config.fromfile(path)
    except SyntaxError as err:
        where, found = _syntax_error_in(path) or (path, err)
        text = (found.text or '').strip()
        raise ConfigError(
            f'config {where}, line {found.lineno}: syntax error ({found.msg})' + (f': {text}' if text else '')
        ) from None
    except (ImportError, NameError, TypeError, ValueError, ArithmeticError, KeyError, AttributeError) as err:
        library = (sys.prefix, sys.base_prefix, osp.dirname(osp.dirname(osp.abspath(__file__))))
        frames = [  # module-level code of a config file (mmengine runs each with its own file name)
            f
            for f in traceback.extract_tb(err.__traceback__)
            if f.name == '<module>' and not f.filename.startswith(library) and f.filename != osp.abspath(sys.argv[0])
        ]
        where = f'{frames[-1].filename}, line {frames[-1].lineno}' if frames else path
        raise ConfigError(f'config {where}: {type(err).__name__}: {err}') from None


def configs_dir() -> str:
    """The folder of the shipped configs: ``vispe/configs`` in a wheel, else ``configs/`` next to the package."""
    package = osp.dirname(osp.dirname(osp.abspath(__file__)))
    shipped = osp.join(package, 'configs')
    return shipped if osp.isdir(shipped) else osp.join(osp.dirname(package), 'configs')


def shipped_configs() -> list[str]:
    """The names of the shipped configs, e.g. 'vit/vit_tiny_shapes2d_position.py' (bases under _base_/ included)."""
    root = configs_dir()
    names = [
        osp.relpath(osp.join(folder, f), root).replace(osp.sep, '/')
        for folder, _, files in os.walk(root)
        for f in files
        if f.endswith('.py') and f != '__init__.py'
    ]
    return sorted(names)


def resolve_config(path: str) -> str:
    """``path`` when it is a file, else the shipped config it names; FileNotFoundError with the closest names."""
    if osp.isfile(path):
        return path
    name = path.replace(osp.sep, '/')
    name = name[len('configs/') :] if name.startswith('configs/') else name
    if not osp.isabs(path):
        shipped = osp.join(configs_dir(), name)
        if osp.isfile(shipped):
            return shipped
    if osp.isdir(path):
        check_file(path, 'config file', inside=lambda d: files_inside(d, ('.py',), 'configs'))
    close = difflib.get_close_matches(name, shipped_configs(), n=3, cutoff=0.6)
    hint = f'did you mean {", ".join(close)}?' if close else 'shipped configs: `vispe configs` lists them'
    raise FileNotFoundError(
        f'config file {path!r} does not exist, here nor among the shipped configs (e.g. vit/, dit/); {hint}'
    )
