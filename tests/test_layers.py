"""The house keeps its layers (workbench/layers.py, rendered in docs/design.md): every import of every module under
vispe/, workbench/ and tools/, read with ast (nothing is imported), goes to its own layer or one its layer may import,
and no chain of imports between modules runs in a circle. Imports inside functions count as much as the others."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from workbench.layers import BELOW, LAYERS, ROOT, ROOTS, allowed, layer_of


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def house() -> dict[str, Path]:
    """Every module of the house: dotted name -> file."""
    return {module_name(p): p for root in ROOTS for p in sorted((ROOT / root).rglob('*.py'))}


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding='utf-8'), str(path))


def imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for every import in module ``name`` (file ``path``) of a module under ROOTS; ``from a import b``
    names ``a.b`` when that is a module, else ``a``."""
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                base = '.'.join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f'{base}.{alias.name}'
                found.append((node.lineno, full if full in modules else base))
    return [(line, target) for line, target in found if target.split('.')[0] in ROOTS]


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def forbidden(modules: dict[str, Path]) -> list[str]:
    """One line per import that breaks a rule of the table (file, line, import, rule), or per module no layer holds."""
    broken = []
    for name, path in modules.items():
        here = layer_of(name)
        if here is None:
            broken.append(f'{shown(path)}: no layer holds {name}; add it to LAYERS in workbench/layers.py')
            continue
        may = allowed(here)
        for line, target in imports(name, path, modules):
            there = layer_of(target)
            if there not in may:
                rule = ', '.join(sorted(may))
                broken.append(f'{shown(path)}:{line} imports {target} (layer {there}); layer {here} may import {rule}')
    return broken


def circles(modules: dict[str, Path]) -> list[list[str]]:
    """The circles of the import graph between modules: each strongly connected component of more than one module
    (Tarjan), as one shortest circle through it. A module's import of its own package (``import vispe.encodings`` in
    vispe/encodings/build.py) is left out: Python loads a package before any module in it, so that edge is there for
    every module and closes no circle of the code's making."""
    graph = {
        name: {t for _, t in imports(name, path, modules) if t in modules and not name.startswith(t + '.')} - {name}
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(shortest_circle(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def shortest_circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest circle through the first module of ``component`` (breadth first), ending where it starts."""
    start = min(component)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came:
                    came[nxt] = node
                    following.append(nxt)
        frontier = following
    return sorted(component)


def test_the_table_only_rises() -> None:
    for name, layer in LAYERS.items():
        for other in layer.may_import:
            if other != BELOW:
                assert other in LAYERS, f'{name} may import {other}, which is no layer'
                assert LAYERS[other].floor < layer.floor, f'{name} may import {other}, which is not on a lower floor'


def test_every_import_keeps_to_its_layer() -> None:
    broken = forbidden(house())
    assert not broken, "imports that break docs/design.md's layers:\n" + '\n'.join(broken)


def test_no_import_circle() -> None:
    found = circles(house())
    assert not found, 'import circles between modules:\n' + '\n'.join(' -> '.join(c) for c in found)


def with_module(tmp_path: Path, name: str, text: str) -> dict[str, Path]:
    """The house plus module ``name`` holding ``text`` (written under tmp_path, the tree untouched)."""
    path = tmp_path / f'{name}.py'
    path.write_text(text)
    return {**house(), name: path}


@pytest.mark.parametrize(
    ('name', 'source', 'target'),
    [
        ('vispe.layout', 'def f():\n    from workbench import generated_docs\n', 'workbench.generated_docs'),
        ('vispe.sweeps.stand_in', 'import tools.train\n', 'tools.train'),
        ('vispe.encodings.stand_in', 'from ..cli import train\n', 'vispe.cli.train'),
        ('vispe.backbones.stand_in', 'from vispe.datasets import shapes2d\n', 'vispe.datasets.shapes2d'),
        ('vispe.positions', 'from vispe import attention\n', 'vispe.attention'),
    ],
)
def test_a_forbidden_import_is_named(tmp_path: Path, name: str, source: str, target: str) -> None:
    broken = [line for line in forbidden(with_module(tmp_path, name, source)) if line.startswith(str(tmp_path))]
    assert len(broken) == 1 and f'imports {target} (layer ' in broken[0] and 'may import' in broken[0], broken


def test_a_circle_is_found(tmp_path: Path) -> None:
    modules = with_module(tmp_path, 'vispe.geometry', 'from vispe.checks import once_per_build\n')
    (tmp_path / 'checks.py').write_text('from vispe import geometry\n')
    modules['vispe.checks'] = tmp_path / 'checks.py'
    assert ['vispe.checks', 'vispe.geometry', 'vispe.checks'] in circles(modules)
