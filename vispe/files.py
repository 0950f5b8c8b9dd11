"""The one check that a path the user gave names a file: a directory is reported as a directory (with what it
holds that was probably meant), not as a file that "does not exist"."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable


def check_file(path: str, what: str, missing: str | None = None, inside: Callable[[str], str] | None = None) -> None:
    """FileNotFoundError unless ``path`` is a file: ``missing`` (default ``"{what} 'path' does not exist"``) when
    nothing is there; for a directory, ``"{what} 'path' is a directory, not a file"`` and ``inside(path)``, the hint
    naming what in it to pass instead (FileNotFoundError either way, so every caller's handling stays as it is)."""
    if os.path.isfile(path):
        return
    if os.path.isdir(path):
        hint = inside(path) if inside is not None else ''
        raise FileNotFoundError(f'{what} {path!r} is a directory, not a file{hint}')
    raise FileNotFoundError(missing or f'{what} {path!r} does not exist')


def files_inside(directory: str, suffixes: tuple[str, ...], kind: str, first: int = 3) -> str:
    """The hint ``; pass the images in it, e.g. 'd/a.png', 'd/b.png' (+5 more)`` for the ``suffixes`` files
    directly in ``directory``, or ``; it holds no images (.png, .jpg)``."""
    found = sorted(p for p in glob.glob(os.path.join(glob.escape(directory), '*')) if p.lower().endswith(suffixes))
    if not found:
        return f'; it holds no {kind} ({", ".join(suffixes)})'
    more = f' (+{len(found) - first} more)' if len(found) > first else ''
    return f'; pass the {kind} in it, e.g. {", ".join(map(repr, found[:first]))}{more}'


__all__ = ['check_file', 'files_inside']
