"""Docstrings as the config surface: every class (and function) in a vispe registry documents each of its
constructor's arguments in one Google-style ``Args:`` block of its class docstring, since those arguments are what
a config writes and the site's API pages render that block.

Collected from every mmengine ``Registry`` in vispe.registry, so a newly registered class without the block fails
here. Each entry is ``name: meaning``: the type and the default are the signature's, and the site's renderer (griffe)
takes them from there, so an entry that repeats either is refused. ``*args`` / ``**kwargs`` are listed as such,
saying where they go. A class whose constructor takes
nothing says ``Takes no arguments`` instead. A subclass that inherits its ``__init__`` from a vispe class may say
``Arguments: as `Base``` and leave the block to that base.

vispe.sweeps.registry.SWEEPS is not covered: it holds sweep kinds (dataclass instances the CLI runs), not classes a
config builds.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pytest

import vispe.registry as registries

_NO_ARGUMENTS = 'Takes no arguments'
_AS_BASE = re.compile(r'(?:Other a|A)rguments: as `(\w+)`')
_DEFAULTS_TO = re.compile(r'Defaults to (.+)\.$')
_SECTION = re.compile(r'^(\s*)(Args|Arguments|Parameters):\s*$')


#: what vispe itself registers, read in a fresh interpreter: tests register toy classes of their own
#: (test_diffusion's TinyDenoiser), which this process may already hold when it collects this file
_LISTING = """
import json
import vispe.registry as registries
from mmengine.registry import Registry
found = []
for reg_name, reg in vars(registries).items():
    if isinstance(reg, Registry):
        reg.import_from_location()
        found += [[reg_name, name, getattr(obj, '__module__', '')] for name, obj in reg.module_dict.items()]
print(json.dumps(found))
"""


def _vispe_registered() -> list[tuple[str, str, str]]:
    """(registry, name, module) of every object a plain ``import vispe`` registers."""
    out = subprocess.run([sys.executable, '-c', _LISTING], capture_output=True, text=True, check=True).stdout
    return [tuple(row) for row in json.loads(out.strip().splitlines()[-1])]


def _registered() -> list[tuple[str, str, object]]:
    entries = []
    for reg_name, name, _ in VISPE_REGISTERED:
        reg = getattr(registries, reg_name)
        reg.import_from_location()
        entries.append((reg_name, name, reg.module_dict[name]))
    return entries


VISPE_REGISTERED = _vispe_registered()
ENTRIES = _registered()


def _init_owner(cls: type) -> type:
    """The class whose ``__init__`` ``cls`` runs."""
    return next(c for c in cls.__mro__ if '__init__' in vars(c))


def _parameters(obj: object) -> list[inspect.Parameter]:
    if inspect.isclass(obj):
        if _init_owner(obj) is object:
            return []
        params = list(inspect.signature(obj.__init__).parameters.values())[1:]  # self
    else:
        params = list(inspect.signature(obj).parameters.values())
    return params


def _doc_name(param: inspect.Parameter) -> str:
    stars = {inspect.Parameter.VAR_POSITIONAL: '*', inspect.Parameter.VAR_KEYWORD: '**'}.get(param.kind, '')
    return stars + param.name


def args_sections(doc: str) -> list[dict[str, str | None]]:
    """Each ``Args:`` block of ``doc`` as {name (with any ``*``/``**``): what its parentheses hold, or None, then
    ``, default X`` when the entry's text ends with 'Defaults to X.'}: what an entry must not repeat."""
    lines = inspect.cleandoc(doc).splitlines()
    sections = []
    i = 0
    while i < len(lines):
        match = _SECTION.match(lines[i])
        i += 1
        if not match:
            continue
        indent = len(match.group(1))
        entries: dict[str, str | None] = {}
        entry_indent = None
        texts: list[str] = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            this_indent = len(line) - len(line.lstrip())
            entry_indent = this_indent if entry_indent is None else entry_indent
            if this_indent != entry_indent:
                texts[-1] += ' ' + line.strip()  # a continuation line
                continue
            texts.append(line.strip())
        for text in texts:
            name, paren = _split_entry(text)
            default = _DEFAULTS_TO.search(text)
            if default is not None:
                paren = f'{paren}, default {default.group(1)}' if paren else f'default {default.group(1)}'
            entries[name] = paren
        sections.append(entries)
    return sections


def _split_entry(text: str) -> tuple[str, str | None]:
    """``name (type): meaning`` -> (name, 'type'); a malformed entry -> (text, None)."""
    match = re.match(r'(\*{0,2}\w+)(\s*\(|:)', text)
    if not match:
        return text, None
    name = match.group(1)
    if match.group(2) == ':':
        return name, None
    depth, start = 0, match.end() - 1
    for j in range(start, len(text)):
        depth += {'(': 1, ')': -1}.get(text[j], 0)
        if depth == 0:
            return (name, text[start + 1 : j]) if text[j + 1 : j + 2] == ':' else (text, None)
    return text, None


def _problems(obj: object) -> list[str]:
    doc = inspect.getdoc(obj) if not inspect.isclass(obj) else obj.__doc__
    doc = doc or ''
    params = _parameters(obj)
    sections = args_sections(doc)
    problems = []
    if inspect.isclass(obj) and '__init__' in vars(obj) and args_sections(vars(obj)['__init__'].__doc__ or ''):
        problems.append('has an Args block in __init__: put it in the class docstring')
    if len(sections) > 1:
        problems.append(f'has {len(sections)} Args blocks, not one')
    if not sections:
        if not params:
            return problems if _NO_ARGUMENTS in doc else [*problems, f'takes no arguments; say {_NO_ARGUMENTS!r}']
        base = _AS_BASE.search(doc)
        if inspect.isclass(obj) and base and '__init__' not in vars(obj):
            owner = _init_owner(obj)
            if owner.__name__ != base.group(1):
                problems.append(f'says its arguments are as {base.group(1)}, but runs {owner.__name__}.__init__')
            elif not owner.__module__.startswith('vispe.'):
                problems.append(f"{owner.__name__} is not vispe's: document its arguments here")
            else:
                problems += [f'(via {owner.__name__}) {p}' for p in _problems(owner)]
            return problems
        return [*problems, 'has no Args block']
    documented = sections[0]
    expected = {_doc_name(p): p for p in params}
    problems += [f'does not document {name!r}' for name in expected if name not in documented]
    extra = [name for name in documented if name not in expected]
    problems += [f'documents {name!r}, which its constructor does not take' for name in extra]
    for name in expected:
        if name not in documented or name.startswith('*'):
            continue
        paren = documented[name]
        if paren is not None and ', default ' in f', {paren}':
            problems.append(f'{name!r}: states its default, which the signature gives')
        elif paren is not None:
            problems.append(f'{name!r}: states its type "({paren})", which the signature gives')
    return problems


@pytest.mark.parametrize(('registry', 'name', 'obj'), ENTRIES, ids=[f'{r}:{n}' for r, n, _ in ENTRIES])
def test_registered_arguments_are_documented(registry: str, name: str, obj: object) -> None:
    problems = _problems(obj)
    assert not problems, f'{registry} {name!r}: ' + '; '.join(problems)


def test_every_registry_is_collected() -> None:
    assert {r for r, _, _ in ENTRIES} >= {'ENCODINGS', 'MODELS', 'DATASETS', 'TRANSFORMS', 'HOOKS'}
    assert len(ENTRIES) >= 50


def test_the_parser_reads_entries() -> None:
    doc = """Prose.

    Args:
        dim (int): token width;
            more about it.
        grid_size: the
            grid. Defaults to (14, 14).
        theta: base.
        **kwargs: passed to ``Base``.

    Returns:
        nothing (really): ignored.
    """
    entries = {'dim': 'int', 'grid_size': 'default (14, 14)', 'theta': None, '**kwargs': None}
    assert args_sections(doc) == [entries]


def test_the_check_fails_on_missing_extra_and_repeated_arguments() -> None:
    class Undocumented:
        """Prose only."""

        def __init__(self, dim: int) -> None: ...

    class Drifted:
        """Prose.

        Args:
            dim: width.
            theta: base. Defaults to 10.0.
            gone: no longer taken.
        """

        def __init__(self, dim: int, theta: float = 10.0, grid: int = 14, **kwargs: object) -> None: ...

    class Typed:
        """Prose.

        Args:
            dim (int): width.
        """

        def __init__(self, dim: int) -> None: ...

    class Plain:
        """Prose.

        Args:
            dim: width.
        """

        def __init__(self, dim: int) -> None: ...

    class Empty:
        """Prose."""

    assert _problems(Undocumented) == ['has no Args block']
    assert sorted(_problems(Drifted)) == sorted(
        [
            "does not document 'grid'",
            "does not document '**kwargs'",
            "documents 'gone', which its constructor does not take",
            "'theta': states its default, which the signature gives",
        ]
    )
    assert _problems(Typed) == ['\'dim\': states its type "(int)", which the signature gives']
    assert _problems(Plain) == []
    assert _problems(Empty) == [f'takes no arguments; say {_NO_ARGUMENTS!r}']


def test_registered_objects_are_vispe_own() -> None:
    """Nothing is skipped above: every registered object is vispe's (none of mmengine's merely re-registered)."""
    foreign = [f'{r}:{n}' for r, n, module in VISPE_REGISTERED if not module.startswith('vispe.')]
    assert not foreign
