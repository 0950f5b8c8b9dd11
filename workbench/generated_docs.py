"""The parts of the docs that are computed from the code (counts, tables), kept between markers in the pages:

    <!-- generated: NAME -->...text that SECTIONS[NAME]() returns...<!-- /generated -->

inline for a count, or around a table (its text then starts and ends with a newline).

``python workbench/generated_docs.py`` rewrites every marked part in docs/ and README.md; tests/test_generated_docs.py
fails, naming the page and the section, when one is stale, so a count or a table never drifts from the code.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r'(<!-- generated: ([\w-]+) -->)(.*?)(<!-- /generated -->)', re.S)


def encoding_count() -> str:
    import vispe

    return str(len(vispe.list_encodings()))


def timm_name_count() -> str:
    import vispe

    return str(len(vispe.TIMM_NAMES))


def hook_count() -> str:
    from vispe.encodings import HOOK_TABLE

    return str(len(HOOK_TABLE))


def hook_table() -> str:
    from vispe.encodings import HOOK_TABLE

    rows = ['| hook | signature | called |', '|---|---|---|']
    rows += [f'| `{h.name}` | `{h.signature}` | {h.call_point} |' for h in HOOK_TABLE.values()]
    return '\n' + '\n'.join(rows) + '\n'


def layer_diagram() -> str:
    from workbench import layers

    return layers.diagram()


def layer_table() -> str:
    from workbench import layers

    return layers.table()


#: section name -> a function returning its text
SECTIONS: dict[str, Callable[[], str]] = {
    'encoding-count': encoding_count,
    'timm-name-count': timm_name_count,
    'hook-count': hook_count,
    'hook-table': hook_table,
    'layer-diagram': layer_diagram,
    'layer-table': layer_table,
}


def pages() -> list[Path]:
    return [ROOT / 'README.md', *sorted((ROOT / 'docs').rglob('*.md'))]


def render(text: str, cache: dict[str, str]) -> str:
    """``text`` with every marked section replaced by what its function returns now."""

    def fill(match: re.Match) -> str:
        name = match.group(2)
        if name not in SECTIONS:
            raise KeyError(f'unknown generated section {name!r}; known: {sorted(SECTIONS)}')
        if name not in cache:
            cache[name] = SECTIONS[name]()
        return match.group(1) + cache[name] + match.group(4)

    return MARKED.sub(fill, text)


def stale() -> list[str]:
    """'page: section' for every marked section whose text is not what the code gives now."""
    cache: dict[str, str] = {}
    found = []
    for page in pages():
        text = page.read_text(encoding='utf-8')
        for match in MARKED.finditer(text):
            if render(match.group(0), cache) != match.group(0):
                found.append(f'{page.relative_to(ROOT)}: {match.group(2)}')
    return found


def main() -> int:
    cache: dict[str, str] = {}
    for page in pages():
        text = page.read_text(encoding='utf-8')
        new = render(text, cache)
        if new != text:
            page.write_text(new, encoding='utf-8')
            print(f'updated {page.relative_to(ROOT)}')
    return 0


if __name__ == '__main__':
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
