"""Files the user gave: whether a path names a file (a directory is reported as one, with a hint), and a file's hash."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable


def check_file(path: str, what: str, missing: str | None = None, inside: Callable[[str], str] | None = None) -> None:
    """FileNotFoundError unless ``path`` is a file: ``missing`` when nothing is there, and for a directory
    ``inside(path)``'s hint."""
    if os.path.isfile(path):
        return
    if os.path.isdir(path):
        hint = inside(path) if inside is not None else ''
        raise FileNotFoundError(f'{what} {path!r} is a directory, not a file{hint}')
    raise FileNotFoundError(missing or f'{what} {path!r} does not exist')


def files_inside(directory: str, suffixes: tuple[str, ...], kind: str, first: int = 3) -> str:
    """The hint naming the first ``suffixes`` files directly in ``directory`` to pass instead (or that none is)."""
    found = sorted(p for p in glob.glob(os.path.join(glob.escape(directory), '*')) if p.lower().endswith(suffixes))
    if not found:
        return f'; it holds no {kind} ({", ".join(suffixes)})'
    more = f' (+{len(found) - first} more)' if len(found) > first else ''
    return f'; pass the {kind} in it, e.g. {", ".join(map(repr, found[:first]))}{more}'


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


__all__ = ['check_file', 'files_inside', 'sha256']
