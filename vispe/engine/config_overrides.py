"""``--cfg-options`` on a config's top-level variables, applied to everything derived from them.

An option whose first name is a variable the config's code reads (``train_resolution=48``) is applied where the variable
is defined, in temporary copies of the file and its bases, and the config is evaluated again; a dotted option on a
helper dict (``shapes2d.image_size=48``) adds the assignment after it. The user's files are never written. Other options
keep mmengine's merge.
"""

from __future__ import annotations

import ast
import os
import os.path as osp
import tempfile
from collections.abc import Mapping
from typing import Any

from mmengine.config import Config

from vispe.engine.config_files import read_config_file


def _assigned(tree: ast.Module) -> dict[str, list[ast.Assign]]:
    found: dict[str, list[ast.Assign]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node)
    return found


def _read_names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _bases(tree: ast.Module) -> tuple[ast.Assign | None, list[str]]:
    for node in _assigned(tree).get('_base_', []):
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            return None, []
        return node, [value] if isinstance(value, str) else list(value)
    return None, []


def _span(node: ast.expr | ast.stmt) -> tuple[int, int, int, int]:
    assert node.end_lineno is not None and node.end_col_offset is not None
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset


def _setting(root: str, path: str, value: Any) -> str:
    """The statement that sets ``root``'s entry at the dotted ``path`` (an integer part indexes a list) to ``value``,
    creating missing dicts."""
    parts = path.split('.')
    code = root
    for part in parts[:-1]:
        code += f'[{int(part)}]' if part.isdigit() else f'.setdefault({part!r}, {{}})'
    last = parts[-1]
    return f'{code}[{int(last) if last.isdigit() else repr(last)}] = {value!r}\n'


class _Rewriter:
    """Temporary copies of a config file and its bases with the options applied to the variables they define."""

    def __init__(self, options: Mapping[str, Any], folder: str) -> None:
        self.options, self.folder = options, folder
        self.applied: set[str] = set()
        self.done: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        """``path`` itself when nothing in it (or its bases) changes, else its rewritten copy."""
        path = osp.abspath(path)
        if path not in self.done:
            self.done[path] = path  # a cycle of bases: mmengine reports it on the original files
            self.done[path] = self._rewrite(path)
        return self.done[path]

    def _rewrite(self, path: str) -> str:
        with open(path, 'rb') as f:
            source = f.read()
        if not source.endswith(b'\n'):
            source += b'\n'
        try:  # parsed as text: a first-line comment such as '... encoding=NAME' is not a coding declaration
            tree = ast.parse(source.decode('utf-8'))  # (columns stay UTF-8 byte offsets)
        except (SyntaxError, UnicodeDecodeError):
            return path  # read_config_file names the error on the original
        edits: list[tuple[int, int, int, int, str]] = []  # (line, byte col, end line, end byte col, new text)
        base_node, bases = _bases(tree)
        moved = [self._base(path, b) for b in bases]
        assigned, read = _assigned(tree), _read_names(tree)
        for key, value in self.options.items():
            root, _, rest = key.partition('.')
            if root not in assigned or root.startswith('_') or root not in read:
                continue
            if not rest:
                edits += [(*_span(node.value), repr(value)) for node in assigned[root]]
            else:
                after = _span(assigned[root][-1])[2] + 1  # a new line after the variable's last assignment
                edits.append((after, 0, after, 0, _setting(root, rest, value)))
            self.applied.add(key)
        if not edits and moved == [self._absolute(path, b) for b in bases]:
            return path
        if base_node is not None:  # the copy lives elsewhere: every base by its absolute path (or rewritten copy)
            edits.append((*_span(base_node.value), repr(moved)))
        starts = [0]  # byte offset of each line (ast's columns are UTF-8 byte offsets)
        for text in source.splitlines(keepends=True):
            starts.append(starts[-1] + len(text))
        for line, col, end_line, end_col, new in sorted(edits, reverse=True):
            start, stop = starts[line - 1] + col, starts[end_line - 1] + end_col
            source = source[:start] + new.encode() + source[stop:]
        target = osp.join(self.folder, f'{len(os.listdir(self.folder))}_{osp.basename(path)}')
        with open(target, 'wb') as f:
            f.write(source)
        return target

    @staticmethod
    def _absolute(path: str, base: str) -> str:
        """A ``_base_`` entry of ``path`` as an absolute path (``pkg::name`` as written)."""
        full = osp.join(osp.dirname(path), base)
        return base if '::' in base or not osp.isfile(full) else osp.abspath(full)

    def _base(self, path: str, base: str) -> str:
        full = self._absolute(path, base)
        return full if full == base else self(full)


def read_with_options(path: str, options: Mapping[str, Any]) -> tuple[Config, set[str]]:
    """The config at ``path`` evaluated with the ``options`` on its variables, and the option keys so applied."""
    with tempfile.TemporaryDirectory(prefix='vispe_config_') as folder:
        rewrite = _Rewriter(options, folder)
        rewritten = rewrite(path)
        if rewritten == osp.abspath(path):
            return read_config_file(path), set()
        cfg = read_config_file(rewritten)
    object.__setattr__(cfg, '_filename', path)  # the user's file, not the temporary copy
    return cfg, rewrite.applied


__all__ = ['read_with_options']
