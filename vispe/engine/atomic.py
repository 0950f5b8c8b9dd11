"""Files that appear whole or not at all (``atomic_open``, ``atomic_write``): a killed process leaves the target as it
was; a full disk is one ``DiskFullError``."""

from __future__ import annotations

import errno
import glob
import os
import os.path as osp
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: infix of the hidden temporary files ``atomic_write`` renames into place: '.epoch_3.pth.partial-<pid>'
PARTIAL = '.partial-'


def partial_path(path: str) -> str:
    """The hidden temporary file beside ``path`` that this process writes before renaming it to ``path``."""
    directory, name = osp.split(osp.abspath(path))
    return osp.join(directory, f'.{name}{PARTIAL}{os.getpid()}')


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DiskFullError(OSError):
    """A write that ran out of disk space or quota; the message is ``'{what}; {advice}'``.

    Args:
        errno_: the ``OSError``'s errno.
        what: which file, what it needed and what is free.
        advice: what to do.
    """

    def __init__(self, errno_: int | None, what: str, advice: str = 'free some space, then run again') -> None:
        super().__init__(errno_, f'{what}; {advice}')
        self.what = what

    def __str__(self) -> str:
        return str(self.strerror)


def _size(nbytes: float) -> str:
    return f'{nbytes / 2**20:.1f} MiB' if nbytes < 2**30 else f'{nbytes / 2**30:.2f} GiB'


def _disk_full(path: str, needed: int | None, err: OSError) -> DiskFullError:
    free = shutil.disk_usage(osp.dirname(osp.abspath(path)) or '.').free
    need = f'it needs {_size(needed)}' if needed else 'it did not fit'
    return DiskFullError(
        err.errno,
        f'no space left on the device while writing {path}: {need} and {_size(free)} are free there; {path} was left '
        'as it was (the data went to a temporary file, now removed)',
    )


@contextmanager
def atomic_open(path: str, mode: str = 'w', size_hint: int | None = None, **kwargs) -> Iterator[Any]:
    """``open(path, mode)`` for writing through a hidden temporary file, flushed and renamed over ``path`` when the
    block ends without error.

    A process killed at any moment leaves ``path`` as it was. A full disk raises ``DiskFullError`` (``size_hint``: bytes
    meant, for its message).
    """
    if not any(c in mode for c in 'wx'):
        raise ValueError(f'atomic_open writes whole files (mode w or wb), got mode {mode!r}')
    tmp = partial_path(path)
    os.makedirs(osp.dirname(tmp), exist_ok=True)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if osp.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError) and not isinstance(err, DiskFullError) and err.errno in _NO_SPACE:
            raise _disk_full(path, size_hint, err) from None
        raise
    _fsync_dir(osp.dirname(tmp))


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def atomic_write(path: str, data: bytes | str, encoding: str = 'utf-8') -> None:
    """Write ``data`` (bytes, or text in ``encoding``) to ``path`` atomically (``atomic_open``)."""
    raw = data if isinstance(data, bytes) else data.encode(encoding)
    with atomic_open(path, 'wb', size_hint=len(raw)) as f:
        f.write(raw)


def remove_partial_files(directory: str) -> list[str]:
    """Delete the temporary files that killed writers left in ``directory``; returns their paths."""
    stale = glob.glob(osp.join(glob.escape(directory), f'.*{PARTIAL}*'))
    for path in stale:
        try:
            os.remove(path)
        except OSError:
            pass
    return stale


__all__ = ['PARTIAL', 'DiskFullError', 'atomic_open', 'atomic_write', 'partial_path', 'remove_partial_files']
