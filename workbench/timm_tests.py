"""Run timm's own model tests (tests/test_models.py of a timm source tree) over vispe's registered names.

    python -m workbench.timm_tests TIMM_SOURCE [--sizes tiny small] [--without fx ...] [-- PYTEST_ARGS...]
    python tools/timm_model_tests.py TIMM_SOURCE ...

TIMM_SOURCE is a timm checkout, or a bare git directory of one (the version nearest the pinned timm). The test file
is copied unmodified but for one change, vispe's module name ('vispe_vit') added to its ``FEAT_INTER_FILTERS``
allow-list, into a temporary folder beside a conftest.py that imports vispe; pytest then runs the model-test
families over the vispe names of the given sizes, and a table of passed / failed / skipped per family is printed.
Exit status: pytest's. Needs no network: vispe's names have no pretrained weights, so timm collects no download.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict

import vispe

#: the folder vispe is imported from (a checkout's root, or site-packages), which the copied tests' conftest puts on
#: sys.path
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(vispe.__file__)))
FAMILIES = (
    'test_model_forward',
    'test_model_backward',
    'test_model_default_cfgs',
    'test_model_default_cfgs_non_std',
    'test_model_forward_intermediates',
    'test_model_forward_intermediates_features',
    'test_model_forward_fx',
    'test_model_backward_fx',
    'test_model_forward_torchscript',
    'test_model_forward_fx_torchscript',
)


def read_test_file(source: str) -> str:
    """tests/test_models.py of a checkout, or of HEAD of a bare git directory."""
    path = os.path.join(source, 'tests', 'test_models.py')
    if os.path.isfile(path):
        with open(path) as f:
            return f.read()
    result = subprocess.run(
        ['git', f'--git-dir={source}', 'show', 'HEAD:tests/test_models.py'], capture_output=True, text=True
    )
    if result.returncode:
        raise SystemExit(f'error: {source!r} is neither a timm checkout nor a bare timm git directory')
    return result.stdout


def add_module_filter(text: str) -> str:
    """The one change: 'vispe_vit' at the head of FEAT_INTER_FILTERS."""
    patched, count = re.subn(r'FEAT_INTER_FILTERS = \[', "FEAT_INTER_FILTERS = ['vispe_vit', ", text, count=1)
    if not count:
        raise SystemExit('error: this test_models.py has no FEAT_INTER_FILTERS list; use a timm 1.0.x source tree')
    return patched


def names(sizes) -> list:
    """vispe's timm names of the given sizes ('tiny', 'small', ...)."""
    return [n for n in vispe.TIMM_NAMES if any(n.startswith(f'vit_{s}_') for s in sizes)]


def split_pytest_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """vispe's arguments and, after the first '--', pytest's (more pytest arguments; not -k: use --without).

    Split by hand: argparse gives a trailing positional nothing once options follow the source ('SRC --sizes tiny --
    -x' was refused) and can give the source to --sizes ('--sizes tiny SRC -- -x' read '-x' as the source)."""
    cut = argv.index('--') if '--' in argv else len(argv)
    return parser.parse_args(argv[:cut]), argv[cut + 1 :]


def main(argv=None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    parser.add_argument('timm_source', help='a timm checkout or bare git directory')
    parser.add_argument('--sizes', nargs='+', default=['tiny', 'small'], help='vispe name sizes (tiny small ...)')
    parser.add_argument('--encodings', nargs='+', help='only the names of these encodings (default: all)')
    parser.add_argument(
        '--without', nargs='+', default=[], help='leave out test families whose name has one of these words (fx ...)'
    )
    parser.usage = parser.format_usage().removeprefix('usage: ').rstrip() + ' [-- PYTEST_ARGS ...]'
    args, pytest_args = split_pytest_args(parser, sys.argv[1:] if argv is None else list(argv))
    if any(a == '-k' or a.startswith('-k') for a in pytest_args):
        parser.error('-k would replace the selection of vispe names; use --without to leave families out')
    selected = [n for n in names(args.sizes) if not args.encodings or any(f'_{e}_224' in n for e in args.encodings)]
    with tempfile.TemporaryDirectory(prefix='timm_tests_') as tmp:
        os.makedirs(os.path.join(tmp, 'tests'))
        with open(os.path.join(tmp, 'tests', 'test_models.py'), 'w') as f:
            f.write(add_module_filter(read_test_file(args.timm_source)))
        with open(os.path.join(tmp, 'tests', 'conftest.py'), 'w') as f:
            f.write(f'import sys\nsys.path.insert(0, {ROOT!r})\nimport vispe  # noqa: F401,E402\n')
        cmd = [sys.executable, '-m', 'pytest', 'tests/test_models.py', '-p', 'no:cacheprovider', '-q', '-rfs']
        keyword = f'({" or ".join(selected)})' + ''.join(f' and not {word}' for word in args.without)
        cmd += ['-k', keyword, '--junitxml', os.path.join(tmp, 'report.xml'), *pytest_args]
        rc = subprocess.call(cmd, cwd=tmp)
        print_table(os.path.join(tmp, 'report.xml'), selected)
    return rc


def print_table(report: str, selected) -> None:
    import xml.etree.ElementTree as ET

    if not os.path.isfile(report):
        return
    counts: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for case in ET.parse(report).getroot().iter('testcase'):
        match = re.match(r'(test_\w+)\[(.+)\]$', case.get('name', ''))  # ids: [1-NAME] or [NAME-1]
        if match is None or not any(p in selected for p in match.group(2).split('-')):
            continue
        outcome = 'passed'
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome = 'failed'
            elif child.tag == 'skipped':
                outcome = 'skipped'
        counts[match.group(1)][outcome] += 1
    print(f'\n{len(selected)} vispe names; per family: collected / passed / failed / skipped')
    for family in FAMILIES:
        c = counts.get(family, Counter())
        print(f'  {family:45s} {sum(c.values()):3d} {c["passed"]:3d} {c["failed"]:3d} {c["skipped"]:3d}')


__all__ = ['FAMILIES', 'add_module_filter', 'main', 'names', 'print_table', 'read_test_file', 'split_pytest_args']

if __name__ == '__main__':
    sys.exit(main())
