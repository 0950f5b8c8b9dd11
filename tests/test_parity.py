"""Parity coverage: every registered encoding and every resolution strategy has a recorded parity test in
tests/parity (its ``METHODS``), or is named here with the reason it has none; the parity page lists the same set.

The parity tests themselves (tests/parity/test_parity_*.py) compare vispe with values recorded from each method's
reference code by the recorders in tools/parity; they need neither the network nor the reference at test time."""

from __future__ import annotations

import ast
import glob
import os
import re

from vispe.registry import ENCODINGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'docs', 'encodings', 'parity.md')

#: methods without a recorded reference, with the reason (the parity page gives the same)
WITHOUT_REFERENCE = {
    'strategy:none': 'positions as given: there is nothing to scale, so nothing to compare',
}


def declared_methods() -> dict[str, str]:
    """Each name in a parity test file's ``METHODS`` -> that file (read as text, not imported)."""
    found: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, 'tests', 'parity', 'test_parity_*.py'))):
        for node in ast.parse(open(path).read()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == 'METHODS' for t in node.targets):
                for name in ast.literal_eval(node.value):
                    assert name not in found, f'{name} is claimed by {found.get(name)} and {path}'
                    found[name] = path
    return found


def every_method() -> set[str]:
    names = set(ENCODINGS.module_dict)
    for cls in ENCODINGS.module_dict.values():
        names |= {f'strategy:{s}' for s in getattr(cls, 'strategies', ())}
    return names


def page_methods() -> set[str]:
    """The first cells of the parity page's tables: `name` for an encoding, `name` (strategy) for a strategy."""
    names = set()
    for line in open(PAGE):
        cell = line.split('|')[1].strip() if line.startswith('| `') else ''
        for name in re.findall(r'`([^`]+)`', cell):
            names.add(f'strategy:{name}' if '(strategy)' in cell else name)
    return names


def test_every_encoding_and_strategy_has_parity_or_a_reason() -> None:
    covered = set(declared_methods())
    assert not covered & set(WITHOUT_REFERENCE), 'a method both tested and excused'
    missing = every_method() - covered - set(WITHOUT_REFERENCE)
    assert not missing, f'no parity test and no reason for: {sorted(missing)}'
    unknown = (covered | set(WITHOUT_REFERENCE)) - every_method()
    assert not unknown, f'parity declared for names vispe does not register: {sorted(unknown)}'


def test_the_parity_page_lists_the_same_methods() -> None:
    assert page_methods() == every_method()
