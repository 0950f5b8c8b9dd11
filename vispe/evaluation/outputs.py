"""Where every report writer checks its target before writing:

* a path that does not exist is written;
* a file of another kind is never written over, ``--force`` or not (JSON over JSON only, PNG over PNG, ...);
* a file of the same kind that vispe wrote for the same report and run (its marker: ``vispe_report`` / ``vispe_run`` in
  JSON, a last-line comment in text, figure metadata) is replaced;
* any other file of the same kind is replaced only with ``force``, else ``OutputConflict`` names the file and the fix.

Writes are atomic. ``forcing(flag)`` sets the default ``force`` of every writer called inside it.
"""

from __future__ import annotations

import contextvars
import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from vispe.engine.atomic import atomic_write

MARKER = 'vispe_report'
RUN = 'vispe_run'
FIGURES = ('.png', '.pdf', '.svg')
_FORCE: contextvars.ContextVar[bool] = contextvars.ContextVar('vispe_outputs_force', default=False)


class OutputConflict(ValueError):
    """A report's target that must not be written over."""


@contextmanager
def forcing(flag: bool) -> Iterator[None]:
    """Within the block, writers called without ``force`` take ``flag`` (a tool's ``--force``)."""
    token = _FORCE.set(bool(flag))
    try:
        yield
    finally:
        _FORCE.reset(token)


def run_id(settings: Any) -> str:
    """A short hash of ``settings`` (anything JSON can write; unknown objects by repr): what tells runs apart."""
    text = json.dumps(settings, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def fmt(path: str | os.PathLike) -> str:
    """'json', 'figure' or 'text', from the file name."""
    ext = os.path.splitext(str(path))[1].lower()
    return 'json' if ext == '.json' else 'figure' if ext in FIGURES else 'text'


def _text_marker(path: str, kind: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    return f'<!-- {MARKER}: {kind} -->' if ext in ('.md', '.html', '') else f'# {MARKER}: {kind}'


def _refuse(path: str, why: str, force_helps: bool = True) -> OutputConflict:
    fix = 'pass --force to replace it, or another --out' if force_helps else 'pass another --out, or move it away'
    return OutputConflict(f'{path} {why}; it was left as it is: {fix}')


def check_target(
    path: str | os.PathLike,
    kind: str | None,
    run: str | None = None,
    force: bool | None = None,
    form: str | None = None,
) -> None:
    """Raise OutputConflict unless a report of ``kind`` (of run ``run``) may be written at ``path`` as ``form``
    (default: from the file name); ``kind=None`` checks the format only."""
    path = str(path)
    force = _FORCE.get() if force is None else force
    if not os.path.lexists(path):
        return
    if os.path.isdir(path):
        raise _refuse(path, 'is a folder, not a file', force_helps=False)
    form = form or fmt(path)
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as err:
        raise _refuse(path, f'cannot be read ({err.strerror})', force_helps=False) from None
    doc: Any = None
    if form == 'json':
        try:
            doc = json.loads(raw)
        except ValueError:
            why = 'is not a JSON file (a checkpoint or data?); no report is written over it'
            raise _refuse(path, why, False) from None
    elif form == 'figure':
        ext = os.path.splitext(path)[1].lower()
        magic = {'.png': b'\x89PNG', '.pdf': b'%PDF'}.get(ext)
        if (magic and not raw.startswith(magic)) or (ext == '.svg' and b'<svg' not in raw[:4096]):
            raise _refuse(path, f'is not a {ext[1:].upper()} image; no figure is written over it', False)
    elif b'\0' in raw:
        raise _refuse(path, 'is a binary file, not text; no report is written over it', False)
    else:
        try:
            raw.decode()
        except UnicodeDecodeError:
            raise _refuse(path, 'is not a text file; no report is written over it', False) from None
    if force or kind is None:
        return
    if form == 'json':
        owner = doc.get(MARKER) if isinstance(doc, dict) else None
        if owner != kind:
            what = f'a vispe {owner} report' if isinstance(owner, str) else 'a JSON file vispe did not write'
            raise _refuse(path, f'is {what}, not this {kind} report')
        if run is not None and doc.get(RUN) != run:
            raise _refuse(path, f'holds the {kind} report of another run (settings {doc.get(RUN)}, now {run})')
    elif form == 'figure':
        if MARKER.encode() not in raw:
            raise _refuse(path, 'is an image vispe did not write')
    elif _text_marker(path, kind) not in raw.decode().splitlines()[-3:]:
        raise _refuse(path, f'is a file vispe did not write as its {kind} report')


def stamped(doc: Mapping[str, Any], kind: str, run: str | None = None) -> dict[str, Any]:
    """``doc`` with its marker keys (``vispe_report``, and ``vispe_run`` when ``run`` is given) in front."""
    head: dict[str, Any] = {MARKER: kind, **({RUN: run} if run is not None else {})}
    return {**head, **{k: v for k, v in doc.items() if k not in (MARKER, RUN)}}


def write_json(
    path: str | os.PathLike,
    doc: Any,
    kind: str | None,
    run: str | None = None,
    force: bool | None = None,
    default: Any = None,
) -> str:
    """Check ``path``, then write ``doc`` as indented JSON atomically (a dict stamped with kind and run); returns it."""
    path = str(path)
    check_target(path, kind, run, force, 'json')
    if kind is not None and isinstance(doc, Mapping):
        doc = stamped(doc, kind, run)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, json.dumps(doc, indent=2, default=default) + '\n')
    return path


def write_text(path: str | os.PathLike, text: str, kind: str | None, force: bool | None = None) -> str:
    """Check ``path``, then write ``text`` and its marker line (none when ``kind`` is None) atomically; returns it."""
    path = str(path)
    check_target(path, kind, None, force, 'text')
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, text if kind is None else text.rstrip('\n') + '\n\n' + _text_marker(path, kind) + '\n')
    return path


def save_figure(fig: Any, path: str | os.PathLike, force: bool | None = None) -> str:
    """Check ``path``, then save the matplotlib figure there atomically with vispe's marker in its metadata."""
    path = str(path)
    check_target(path, 'figure', None, force, 'figure')
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ext = os.path.splitext(path)[1].lower()
    buf = io.BytesIO()
    meta = {'Software': MARKER} if ext in ('.png', '') else {'Creator': MARKER}
    fig.savefig(buf, format=ext[1:] or 'png', metadata=meta, bbox_inches='tight')  # a legend outside the axes too
    atomic_write(path, buf.getvalue())
    return path


__all__ = [
    'MARKER',
    'RUN',
    'OutputConflict',
    'check_target',
    'fmt',
    'forcing',
    'run_id',
    'save_figure',
    'stamped',
    'write_json',
    'write_text',
]
