"""The parts of the docs that are computed from the code (counts, tables), kept between markers in the pages:

    <!-- generated: NAME -->...text that SECTIONS[NAME]() returns...<!-- /generated -->

inline for a count, or around a table (its text then starts and ends with a newline).

``.venv/bin/python workbench/generated_docs.py`` rewrites every marked part in docs/ and README.md;
tests/test_generated_docs.py fails, naming the page and the section, when one is stale, so a count or a table never
drifts from the code.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r'(<!-- generated: ([\w-]+) -->)(.*?)(<!-- /generated -->)', re.S)


def encoding_count() -> str:
    import vispe

    return str(len(vispe.list_encodings()))


def _code(names: Iterable[str]) -> str:
    return ', '.join(f'`{n}`' for n in names)


def encoding_capabilities() -> str:
    """One row per registered encoding: its file, hooks, attention path, strategies, parameters kept out of weight
    decay and TorchScript (the timm ViT's FX graph scripts for every encoding that backbone serves)."""
    import vispe
    from vispe.encodings.base import HOOKS, attention_path
    from vispe.encodings.build import encoding_class

    scriptable = set(vispe.list_encodings(ndim=2))  # what VisionTransformerPE serves (tests/test_trace_export.py)
    rows = [
        '| name | file | hooks | attention path | resolution strategies | no weight decay | TorchScript |',
        '|---|---|---|---|---|---|---|',
    ]
    for name in vispe.list_encodings():
        cls = encoding_class(name)
        hooks = [h + (' (by option)' if h in cls.option_hooks else '') for h in HOOKS if h in cls.hooks()]
        strategies = [
            f'`{s}`' + (' (default)' if i == 0 else ' (opt-in)' if s in cls.opt_in_strategies else '')
            for i, s in enumerate(cls.strategies)
        ]
        decay = _code(cls.no_weight_decay_params) or '-'
        if cls.weight_decay_note:
            decay += f': {cls.weight_decay_note}'
        cells = [
            f'`{name}`',
            f'{cls.__module__.rsplit(".", 1)[-1]}.py',
            ', '.join(hooks),
            attention_path(cls),
            ', '.join(strategies) or '-',
            decay,
            'FX graph' if name in scriptable else '-',
        ]
        rows.append('| ' + ' | '.join(cells) + ' |')
    return '\n' + '\n'.join(rows) + '\n'


def hook_table() -> str:
    """``HOOK_TABLE``, the hook contract, in call order."""
    from vispe.encodings.base import HOOK_TABLE

    rows = ['| hook | signature | called | per layer |', '|---|---|---|---|']
    for hook in HOOK_TABLE.values():
        rows.append(f'| `{hook.name}` | `{hook.signature}` | {hook.call_point} | {"yes" if hook.attention else "-"} |')
    return '\n' + '\n'.join(rows) + '\n'


def timm_name_count() -> str:
    import vispe

    return str(len(vispe.TIMM_NAMES))


def hook_count() -> str:
    from vispe.encodings import HOOK_TABLE

    return str(len(HOOK_TABLE))


def video_encoding_count() -> str:
    """The encodings for (t, h, w) token grids only: neither images nor point clouds."""
    import vispe
    from vispe.encodings.build import encoding_class

    classes = [encoding_class(n) for n in vispe.list_encodings(ndim=3)]
    return str(sum(1 for cls in classes if cls.ndims == (3,) and cls.needs_grid))


def _leaderboard_specs() -> list[str]:
    """What ``make leaderboard`` trains by default: every 2D encoding, then the named variants."""
    import vispe
    from workbench.leaderboard import VARIANTS

    return [*vispe.list_encodings(ndim=2), *VARIANTS]


def leaderboard_encoding_count() -> str:
    import vispe

    return str(len(vispe.list_encodings(ndim=2)))


def leaderboard_variant_count() -> str:
    from workbench.leaderboard import VARIANTS

    return str(len(VARIANTS))


#: the leaderboard's default seeds (``tools/leaderboard.py --seeds``; the pages name them)
LEADERBOARD_SEEDS = (0, 1, 2)


def _leaderboard_tasks() -> tuple[str, ...]:
    from workbench.leaderboard import DEFAULT_TASKS

    return tuple(DEFAULT_TASKS)


def leaderboard_run_count() -> str:
    """Runs of one training regime: every spec on every task at every seed."""
    return str(len(_leaderboard_specs()) * len(_leaderboard_tasks()) * len(LEADERBOARD_SEEDS))


def leaderboard_archived_run_count() -> str:
    """Runs of the fixed regime the archive (results/leaderboard/TASK/SPEC/seedN/run.json) holds."""
    archive = ROOT / 'results' / 'leaderboard'
    return str(sum(len(list((archive / task).glob('*/seed*/run.json'))) for task in _leaderboard_tasks()))


def layer_diagram() -> str:
    from workbench import layers

    return layers.diagram()


def layer_table() -> str:
    from workbench import layers

    return layers.table()


#: section name -> a function returning its text
SECTIONS: dict[str, Callable[[], str]] = {
    'encoding-count': encoding_count,
    'encoding-capabilities': encoding_capabilities,
    'hook-table': hook_table,
    'timm-name-count': timm_name_count,
    'hook-count': hook_count,
    'video-encoding-count': video_encoding_count,
    'leaderboard-encoding-count': leaderboard_encoding_count,
    'leaderboard-variant-count': leaderboard_variant_count,
    'leaderboard-run-count': leaderboard_run_count,
    'leaderboard-archived-run-count': leaderboard_archived_run_count,
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
