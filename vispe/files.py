"""Files the user gave: the one check that a path names a file (a directory is reported as a directory, with what it
holds that was probably meant, not as a file that "does not exist"), and a file's content hash."""

from __future__ import annotations

import glob
import hashlib
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


def sha256(path: str) -> str:
    """The sha256 of a file's content, read in 1 MiB blocks (the model zoo's checksum, a sweep's checkpoint
    identity)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


__all__ = ['check_file', 'files_inside', 'sha256']
