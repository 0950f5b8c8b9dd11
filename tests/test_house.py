"""The house rules of ``vispe/`` that a reader relies on, checked on the source text: docstrings are contracts (at
most 12% of the lines), no file is over 400 lines, and no development history (issue numbers, commit hashes, machine
names) is left in importable code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / 'vispe'
FILES = sorted(PACKAGE.rglob('*.py'))
MAX_DOCSTRING_SHARE = 0.12
MAX_LINES = 400
HISTORY = re.compile(r'\bissues? #?\d+|\bH100\b|\bH200\b|quiet machine|\bcommit [0-9a-f]{7,40}\b', re.I)


def docstring_lines(source: str) -> int:
    """Lines taken by the docstrings of the module and of every class and function in ``source``."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, 'value', None), str):
                count += (first.end_lineno or first.lineno) - first.lineno + 1
    return count


def test_docstrings_are_at_most_an_eighth_of_the_package() -> None:
    sources = [path.read_text() for path in FILES]
    share = sum(map(docstring_lines, sources)) / sum(len(s.splitlines()) for s in sources)
    assert share <= MAX_DOCSTRING_SHARE, f'docstrings are {share:.1%} of vispe/ (at most {MAX_DOCSTRING_SHARE:.0%})'


def test_no_file_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in FILES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f'files over {MAX_LINES} lines: {long}'


@pytest.mark.parametrize('path', FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_history_in_the_code(path: Path) -> None:
    found = [f'{i}: {line.strip()}' for i, line in enumerate(path.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not found, f'{path.relative_to(PACKAGE)} carries development history: {found}'


def test_the_history_pattern_finds_what_it_must() -> None:
    for text in ('as issue 41 measured', 'see issues #12', 'one H200', 'on one quiet machine', 'since commit 40472da'):
        assert HISTORY.search(text), text
    assert not HISTORY.search('an issue with the grid, H x W = 224')
