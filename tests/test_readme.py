"""The README is a landing page (issue 40): it opens with the two commands, stays under 250 lines, and every file
it links exists, so that a reader on a fresh clone (or on the repository's web page) never follows a dead link.
The site's own links are checked by ``make docs`` (``mkdocs build --strict``, in CI)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT as _ROOT

ROOT = Path(_ROOT)

README = (ROOT / 'README.md').read_text()


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    first_block = README.split('```')[1]
    assert 'make demo' in first_block and 'make test' in first_block
    assert len(README.splitlines()) < 250


def test_every_file_the_readme_links_exists() -> None:
    targets = [t for t in re.findall(r'\]\(([^)#\s]+)', README) if '://' not in t]
    assert len(targets) >= 10  # the links into the site are there
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f'README links to missing files: {missing}'
    backticked = re.findall(r'`([\w./-]+\.(?:md|py|sh|txt|yml))`', README)
    missing = [t for t in backticked if '/' in t and not (ROOT / t).exists()]
    assert not missing, f'README names missing files: {missing}'
