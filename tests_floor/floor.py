"""The helpers of ``make test-floor`` (run with the floor venv's Python, from the checkout's root).

``floor.py pins FILE``: write ``name==floor`` for every ``name>=floor`` of setup.py's INSTALL_REQUIRES.
``floor.py keep-torch FILE``: in a venv holding torch and no torchvision, check that a plain ``pip install .``
would replace that torch, and that ``pip install . "torch==<installed>"`` (the README's line) keeps it; the
other floors come from FILE as constraints, torchvision is left to the resolver.
``floor.py record FILE LOG``: after the smoke suite passed (LOG: its pytest output), write the record (the
installed floor versions, Python, platform, date) to FILE.
"""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import importlib.util
import json
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = re.compile(r'^([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)$')


def floors() -> dict[str, str]:
    """setup.py's INSTALL_REQUIRES as {name: floor} for its ``name>=floor`` entries (read, not run)."""
    tree = ast.parse((ROOT / 'setup.py').read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'INSTALL_REQUIRES' for t in node.targets):
            found = (FLOOR.match(r) for r in ast.literal_eval(node.value))
            return {m[1].lower(): m[2] for m in found if m}
    raise SystemExit('error: setup.py has no INSTALL_REQUIRES list')


def pip(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, '-m', 'pip', *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f'error: {" ".join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}')
    return proc


def torch_state() -> tuple[str, str]:
    """(version, the RECORD of the installed torch): a reinstall of the same version rewrites it."""
    dist = importlib.metadata.distribution('torch')
    return dist.version, dist.read_text('RECORD') or ''


def keep_torch(pins_file: str) -> None:
    version, record = torch_state()
    if importlib.util.find_spec('torchvision') is not None:
        raise SystemExit('error: keep-torch needs a venv with torch and no torchvision')
    constraints = Path(tempfile.mkdtemp()) / 'constraints.txt'
    lines = Path(pins_file).read_text().splitlines()
    constraints.write_text('\n'.join(p for p in lines if not p.startswith(('torch==', 'torchvision=='))) + '\n')
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, 'report.json')
        pip('install', '--dry-run', '--quiet', '--report', str(report), '-c', str(constraints), '.')
        wanted = json.loads(report.read_text())['install']
        plan = {i['metadata']['name'].lower(): i['metadata']['version'] for i in wanted}
    if 'torch' not in plan:
        raise SystemExit(f'error: a plain `pip install .` now keeps torch {version}: the README says it does not')
    print(f'a plain `pip install .` would replace torch {version} by torch {plan["torch"]}')
    pip('install', '--quiet', '-c', str(constraints), '.', f'torch=={version}')
    if torch_state() != (version, record):
        raise SystemExit(f'error: `pip install . "torch=={version}"` changed the installed torch')
    tv = importlib.metadata.version('torchvision')
    print(f'`pip install . "torch=={version}"` kept torch {version} and installed torchvision {tv} beside it')


def release(version: str) -> tuple[int, ...]:
    """'2.7' and '2.7.0+cu126' -> (2, 7): the numeric release, trailing zeros dropped (PEP 440's equality)."""
    parts = [int(p) for p in version.split('+')[0].split('.')]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def record(out: str, log: str) -> None:
    """Write the record, after checking that each installed floor package is setup.py's floor (torchvision comes
    from the resolver: the one that the floor torch takes)."""
    names = floors()
    passed = {name: importlib.metadata.version(name) for name in sorted(names)}
    for name, version in passed.items():
        if release(version) != release(names[name]):
            raise SystemExit(
                f'error: setup.py states {name}>={names[name]} but the floor venv holds {name} {version} (what the '
                f'floor torch takes): set the floor to {version}'
            )
    summary = [line for line in Path(log).read_text().splitlines() if line.strip()][-1]
    doc = {
        'about': 'written by make test-floor: the versions its smoke suite (tests_floor/) passed with; '
        "tests/test_install.py checks that setup.py's floors equal them",
        'passed': passed,
        'smoke': re.sub(r' in [0-9.]+s.*$', '', summary.strip('= ')),
        'python': platform.python_version(),
        'platform': f'{platform.system()} {platform.machine()}',
        'date': datetime.date.today().isoformat(),
    }
    Path(out).write_text(json.dumps(doc, indent=2) + '\n')
    print(f'wrote {out}: ' + ', '.join(f'{k} {v}' for k, v in passed.items()))


def main(argv: list[str]) -> None:
    if argv[:1] == ['pins'] and len(argv) == 2:
        Path(argv[1]).write_text(''.join(f'{name}=={v}\n' for name, v in floors().items()))
    elif argv[:1] == ['keep-torch'] and len(argv) == 2:
        keep_torch(argv[1])
    elif argv[:1] == ['record'] and len(argv) == 3:
        record(argv[1], argv[2])
    else:
        raise SystemExit('usage: floor.py pins FILE | keep-torch FILE | record FILE LOG')


if __name__ == '__main__':
    main(sys.argv[1:])
