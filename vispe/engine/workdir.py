"""Work-dir protection: one training run per work dir, and checks that it can be written before anything is.

``WorkDirLock`` is an exclusive POSIX record lock on ``<work_dir>/.vispe.lock``, held for the run's lifetime and dropped
by the kernel however the process ends; the holder's PID, host, start time and command are written there, so a second
run (also in the same process) is refused naming them.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import json
import os
import os.path as osp
import socket
import sys
import tempfile
import time
from typing import Any

if sys.platform != 'win32':
    import fcntl
# else Windows: no record locks; the lock is then advisory per process only

LOCK_NAME = '.vispe.lock'
_HELD: dict[str, WorkDirLock] = {}  # realpath of a lock file -> the lock this process holds on it


def set_aside(work_dir: str, checkpoints: list[str]) -> str:
    """Move a replaced run's checkpoints and ``last_checkpoint`` pointer into ``<work_dir>/replaced-<time>/``; returns
    the line to log."""
    dest = osp.join(work_dir, time.strftime('replaced-%Y%m%d-%H%M%S'))
    while osp.exists(dest):
        dest += '+'
    os.makedirs(dest)
    pointer = osp.join(work_dir, 'last_checkpoint')
    for path in [*checkpoints, *([pointer] if osp.isfile(pointer) else [])]:
        os.replace(path, osp.join(dest, osp.basename(path)))
    return f"--overwrite: the replaced run's {len(checkpoints)} checkpoint(s) were moved into {dest}"


class WorkDirError(RuntimeError):
    """A work dir that cannot be used for this run; the message says why and what to do."""


def check_work_dir(work_dir: str, what: str = 'work dir', flag: str = '--work-dir') -> None:
    """``WorkDirError`` when ``work_dir`` is a file, sits below one, or cannot be written (tried; nothing stays)."""
    if osp.exists(work_dir) and not osp.isdir(work_dir):
        raise WorkDirError(
            f'{what} {work_dir!r} is a file, not a folder; choose another {flag} (the file was left as it is)'
        )
    existing = osp.abspath(work_dir)
    while not osp.exists(existing):
        existing = osp.dirname(existing)
    if not osp.isdir(existing):
        raise WorkDirError(f'{what} {work_dir!r} cannot be created: {existing!r} is a file; choose another {flag}')
    try:
        fd, probe = tempfile.mkstemp(prefix='.vispe-write-test-', dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        where = 'it' if existing == osp.abspath(work_dir) else f'{existing!r}, where it would be created,'
        raise WorkDirError(
            f'{what} {work_dir!r} is not writable: {where} refuses new files ({err.strerror}); choose another '
            f'{flag} or fix its permissions'
        ) from None


#: what an output folder is never named like: a checkpoint or a report file given where the folder belongs
FILE_SUFFIXES = ('.pth', '.pt', '.ckpt', '.safetensors', '.bin', '.json', '.md', '.csv', '.png', '.pdf', '.svg')


def out_folder(path: str) -> str:
    """``path`` as an output folder (argparse ``type`` of ``--out``): not a file nor a file-like name; writable."""
    ext = osp.splitext(path.rstrip('/'))[1].lower()
    if ext in FILE_SUFFIXES and not osp.isdir(path):
        raise argparse.ArgumentTypeError(
            f'{path} names a {ext} file, not a folder (a checkpoint or report given in its place?): pass a folder'
        )
    try:
        check_work_dir(path, 'output folder', '--out')
    except WorkDirError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return path


def similar_dirs(work_dir: str) -> str:
    """'; similar folders there: a, b' listing the siblings of a missing ``work_dir`` that look like it."""
    parent = osp.dirname(osp.abspath(work_dir))
    if not osp.isdir(parent):
        return ''
    siblings = [name for name in os.listdir(parent) if osp.isdir(osp.join(parent, name))]
    close = difflib.get_close_matches(osp.basename(osp.normpath(work_dir)), siblings, n=3, cutoff=0.6)
    return f'; similar folders there: {", ".join(osp.join(osp.dirname(work_dir), c) for c in close)}' if close else ''


def _describe(holder: dict) -> str:
    started = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.get('started', 0)))
    where = '' if holder.get('host') == socket.gethostname() else f' on host {holder.get("host")}'
    return f'PID {holder.get("pid")}{where}, started {started}: {holder.get("command", "?")}'


def _read(fd: int) -> dict | None:
    data = os.pread(fd, 1 << 16, 0)
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except ValueError:
        return {'pid': '?', 'command': data.decode(errors='replace').strip()[:200]}


class WorkDirLock:
    """The exclusive lock of one work dir; also a context manager.

    ``acquire()`` creates the work dir, takes the lock or raises ``WorkDirError`` naming the holder, and returns what a
    gone holder left (None when clean); ``release()`` frees it.
    """

    def __init__(self, work_dir: str) -> None:
        self.work_dir = work_dir
        self.path = osp.join(work_dir, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self) -> dict | None:
        os.makedirs(self.work_dir, exist_ok=True)
        key = osp.realpath(self.path)
        if key in _HELD:
            raise WorkDirError(
                f'work dir {self.work_dir!r} is in use by another training run of this process (PID {os.getpid()}): '
                'a runner built on it that has not finished train(); let it finish, free it with '
                'runner.release_work_dir(), or train into another work dir'
            )
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if sys.platform != 'win32':
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _read(fd)
            os.close(fd)  # this process holds no lock on it: closing drops nothing
            if err.errno in (errno.EACCES, errno.EAGAIN):
                raise WorkDirError(self._busy(holder)) from None
            raise WorkDirError(
                f'cannot lock work dir {self.work_dir!r} ({err.strerror}); choose another --work-dir'
            ) from None
        previous = _read(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self._details()).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        _HELD[key] = self
        return previous

    def _details(self) -> dict:
        return {
            'pid': os.getpid(),
            'host': socket.gethostname(),
            'started': time.time(),
            'command': ' '.join([osp.basename(sys.executable), *sys.argv]),
        }

    def _busy(self, holder: dict | None) -> str:
        who = _describe(holder) if holder else 'a process that left no details'
        kill = f' (kill {holder["pid"]})' if holder and isinstance(holder.get('pid'), int) else ''
        return (
            f'work dir {self.work_dir!r} is in use by another training run ({who}); two runs in one work dir would '
            f"overwrite each other's checkpoints. Wait for it to finish, stop it{kill}, or train into another "
            '--work-dir'
        )

    def release(self) -> None:
        """Free the lock and clear the holder's details."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _HELD.pop(osp.realpath(self.path), None)
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing drops the record lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> WorkDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def takeover_message(work_dir: str, previous: dict) -> str:
    """The line a run logs when it takes over the lock of a run that is gone."""
    return (
        f'took over the lock of work dir {work_dir!r} from a run that is no longer running ({_describe(previous)}); '
        'it was probably killed. Its complete checkpoints are kept'
    )


#: the first line of the config a training run writes into its work dir: what tells vispe's copy from a user's file
CONFIG_DUMP_MARK = (
    '# vispe: the config of the training run in this work dir (VispeRunner); a later run here replaces it'
)


def config_dump_conflict(work_dir: str, cfg: Any) -> str | None:
    """Why the run must not write its config to ``<work_dir>/<config basename>`` (a user's file there), or None."""
    filename = getattr(cfg, 'filename', None)
    if not filename:
        return None
    name = osp.basename(filename)
    path = osp.join(work_dir, name)
    if not osp.lexists(path):
        return None
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and (text.startswith(CONFIG_DUMP_MARK) or text == cfg.pretty_text):
        return None
    return (
        f'work dir {work_dir!r} holds {name}, which this training run would replace with its config (mmengine '
        f'names the copy after the config) and which no vispe run wrote; nothing was written: move {name} away, or '
        'train into another --work-dir'
    )


__all__ = [
    'CONFIG_DUMP_MARK',
    'LOCK_NAME',
    'WorkDirError',
    'WorkDirLock',
    'check_work_dir',
    'config_dump_conflict',
    'out_folder',
    'set_aside',
    'similar_dirs',
    'takeover_message',
]
