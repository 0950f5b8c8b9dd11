"""The docs' computed parts (workbench/generated_docs.py) match the code: a stale count or table fails, naming the
page and the command that rewrites it."""

from __future__ import annotations

from workbench import generated_docs


def test_generated_sections_are_current() -> None:
    stale = generated_docs.stale()
    assert not stale, f'stale generated docs (run .venv/bin/python workbench/generated_docs.py): {stale}'


def test_every_section_is_used_somewhere() -> None:
    used = {m.group(2) for page in generated_docs.pages() for m in generated_docs.MARKED.finditer(page.read_text())}
    assert used == set(generated_docs.SECTIONS), f'sections never used: {set(generated_docs.SECTIONS) - used}'


def test_a_stale_section_is_found() -> None:
    text = '<!-- generated: encoding-count -->3<!-- /generated -->'
    assert generated_docs.render(text, {}) != text
