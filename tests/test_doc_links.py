"""The Markdown outside the site (README.md, data/README.md, models/README.md) links files and headings that exist,
and no page tells a reader to run a bare ``python``: ``make`` never activates .venv, so a fresh clone runs
``.venv/bin/python ...`` or ``vispe ...``. (The site's own pages are checked by the strict mkdocs build.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the Markdown files read on GitHub, not built into the site
READMES = ['README.md', 'data/README.md', 'models/README.md']
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
FENCE = re.compile(r'^(```|~~~).*?^\1', re.S | re.M)
CODE = re.compile(r'`[^`\n]*`')
HEADING = re.compile(r'^#{1,6}\s+(.*?)\s*#*\s*$', re.M)


def _prose(text: str) -> str:
    """``text`` without its code blocks and inline code, where a ``[x](y)`` is not a link."""
    return CODE.sub('', FENCE.sub('', text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link in a heading keeps its text
    text = re.sub(r'[^\w\- ]', '', text.lower().replace('`', ''))
    return text.replace(' ', '-')


def anchors(path: Path) -> set[str]:
    """Every heading anchor of the Markdown file ``path`` (GitHub numbers a repeated one: ``x``, ``x-1``, ...)."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub('', path.read_text(encoding='utf-8'))):
        base, n = slug(heading), 0
        name = base
        while name in found:
            n += 1
            name = f'{base}-{n}'
        found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or heading does not exist, with the reason."""
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding='utf-8'))):
        if re.match(r'^[a-z][a-z0-9+.-]*:', target):  # https:, mailto:: not this test's business
            continue
        path, _, anchor = target.partition('#')
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f'{target}: no file {file}')
        elif anchor and file.suffix == '.md' and anchor not in anchors(file):
            broken.append(f'{target}: no heading with the anchor #{anchor} in {file}')
    return broken


@pytest.mark.parametrize('name', READMES)
def test_relative_links_resolve(name: str) -> None:
    broken = broken_links(ROOT / name)
    assert not broken, f'{name} links what does not exist: {broken}'


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / 'b.md').write_text('# Train on your own images\n')
    page = tmp_path / 'a.md'
    page.write_text('[x](b.md#train-on-your-own-images) [y](b.md#moved) [z](gone.md) `[c](code.md)`\n')
    assert [b.split(':')[0] for b in broken_links(page)] == ['b.md#moved', 'gone.md']


def test_slugs_follow_github() -> None:
    assert slug('DiT at unseen resolutions (`make demo-dit`)') == 'dit-at-unseen-resolutions-make-demo-dit'
    assert slug('Relative bias: iRPE, RPE-2D, 2D ALiBi') == 'relative-bias-irpe-rpe-2d-2d-alibi'


def _pages() -> list[Path]:
    return [ROOT / 'README.md', ROOT / 'data' / 'README.md', *sorted((ROOT / 'docs').rglob('*.md'))]


#: a bare ``python`` (or ``torchrun``) running one of the checkout's scripts or modules; ``python -m vispe`` is left
#: alone: it is how an installed vispe runs in a user's own environment
BARE_PYTHON = re.compile(
    r'(?<![\w./-])(?:python3?\s+(?:-m\s+(?:workbench|tools|pytest)\b|(?:tools|workbench|examples)/)|torchrun\s+(?:--|tools/))'
)


def bare_python(text: str) -> list[str]:
    """The lines of ``text`` that run a bare ``python`` (the shell finds whatever python is first on PATH)."""
    return [line.strip() for line in text.splitlines() if BARE_PYTHON.search(line)]


def test_no_page_runs_a_bare_python() -> None:
    found = {str(page.relative_to(ROOT)): lines for page in _pages() if (lines := bare_python(page.read_text('utf-8')))}
    assert not found, f'write .venv/bin/python (or a vispe command) instead of a bare python: {found}'


def test_a_bare_python_is_found() -> None:
    text = 'python tools/train.py CONFIG\n`python -m workbench.gpu_check`\ntorchrun --nproc_per_node 2 tools/train.py\n'
    assert bare_python(text) == text.strip().splitlines()
    fine = '.venv/bin/python tools/train.py C\n.venv/bin/torchrun --nproc_per_node 2\n`python -m vispe train`\n'
    assert bare_python(fine) == []
