"""Bad samples on disk: ``SampleError`` naming the file and problem, or (``on_error='skip'``, ``SkipsBadSamples``) a
warning and the next sample; usable but odd files get a ``SampleWarning`` once (``WarnsOnce``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

ON_ERROR = ('raise', 'skip')
SKIP_HINT = "fix or delete the file, or build the data set with on_error='skip' to skip such samples"

#: byte sizes of the PLY scalar types, by each of their names
PLY_SIZES = {
    **dict.fromkeys(['char', 'int8', 'uchar', 'uint8'], 1),
    **dict.fromkeys(['short', 'int16', 'ushort', 'uint16'], 2),
    **dict.fromkeys(['int', 'int32', 'uint', 'uint32', 'float', 'float32'], 4),
    **dict.fromkeys(['double', 'float64'], 8),
}


class SampleError(ValueError):
    """A sample file that cannot be used; the message names the file, the problem (``problem``) and what to do.
    ``too_large``: over the pixel limit."""

    def __init__(self, message: str, problem: str | None = None, too_large: bool = False) -> None:
        super().__init__(message)
        self.problem, self.too_large = problem or message, too_large

    def line(self) -> str:
        """The message as one line, also when a DataLoader worker re-raised it with its traceback."""
        last = [text for text in str(self).splitlines() if text.strip()][-1]
        return last.split(f'{type(self).__name__}: ', 1)[-1]


class SampleWarning(UserWarning):
    """A sample file used but looking wrong; ``warnings.simplefilter('error', SampleWarning)`` makes them errors."""


def read_sample_file(path: str, key: str, read: Callable[[], Any]) -> dict[str, Any]:
    """One file as an inference tool reads it: ``{'file', key, 'warnings'}``, or 'error' in place of ``key`` when
    ``read`` raises OSError or ValueError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', SampleWarning)
        try:
            result: dict[str, Any] = {'file': path, key: read()}
        except (OSError, ValueError) as err:
            message = str(err)
            result = {'file': path, 'error': message if path in message else f'{path}: {message}'}
    result['warnings'] = [str(w.message) for w in caught if issubclass(w.category, SampleWarning)]
    return result


#: how many files ``WarnsOnce`` names before it says that further ones go unnamed
MAX_NAMED_WARNINGS = 20


class WarnsOnce:
    """Warns about each sample of a data set at most once, across workers and epochs (flags in shared memory, made in
    ``__init__``); after ``MAX_NAMED_WARNINGS`` files it stops naming them."""

    def __init__(self, size: int) -> None:
        self.flags = torch.zeros(size, dtype=torch.bool).share_memory_()

    def __call__(self, index: int, message: str | None) -> None:
        if message is None or self.flags[index]:
            return
        self.flags[index] = True
        count = int(self.flags.sum())
        if count <= MAX_NAMED_WARNINGS:
            warnings.warn(message, SampleWarning, stacklevel=3)
        elif count == MAX_NAMED_WARNINGS + 1:
            warnings.warn(
                f'more than {MAX_NAMED_WARNINGS} samples were warned about; further ones are not named (the last: '
                f'{message})',
                SampleWarning,
                stacklevel=3,
            )


def few_points_message(path: str, found: int, wanted: int) -> str | None:
    """A warning when fewer than half of the ``wanted`` points would be the file's own ``found`` ones, else None."""
    if 2 * found >= wanted:
        return None
    return (
        f'{path}: {found} points, far fewer than the {wanted} asked for (num_points): {wanted - found} of them will '
        'be repeats; check the file or use a smaller num_points'
    )


def check_on_error(on_error: str) -> str:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    return on_error


def finite_points(points: np.ndarray, path: str) -> np.ndarray:
    """``points`` when every coordinate is finite, else SampleError naming the file and how many points are bad."""
    bad = ~np.isfinite(points).all(axis=-1)
    if bad.any():
        raise SampleError(
            f'{path}: {int(bad.sum())} of {len(points)} points have NaN or Inf coordinates (first at row '
            f'{int(np.argmax(bad))}); {SKIP_HINT}'
        )
    return points


def check_ply(path: str) -> None:
    """SampleError when a .ply file is shorter than its header promises (open3d would fill the rest with zeros)."""
    with open(path, 'rb') as f:
        if f.readline().strip() != b'ply':
            raise SampleError(f'{path}: not a PLY file (no "ply" magic line); {SKIP_HINT}')
        fmt: str | None = None
        header = 0
        elements: list[tuple[int, int | None]] = []  # per element: count, bytes per item (None: variable)
        for raw in f:
            line = raw.decode('ascii', 'replace').split()
            if not line:
                continue
            if line[0] == 'format':
                fmt = line[1]
            elif line[0] == 'element':
                elements.append((int(line[2]), 0))
            elif line[0] == 'property' and elements:
                count, size = elements[-1]
                if line[1] == 'list':
                    elements[-1] = (count, None)
                elif size is not None:
                    elements[-1] = (count, size + PLY_SIZES.get(line[1], 0))  # unknown types count 0: no false alarm
            elif line[0] == 'end_header':
                header = f.tell()
                break
        else:
            raise SampleError(f'{path}: the PLY header never ends (no end_header line); {SKIP_HINT}')
        body = os.path.getsize(path) - header
        if fmt == 'ascii':
            lines = sum(1 for raw in f if raw.strip())
            needed = sum(count for count, _ in elements)
            if lines < needed:
                raise SampleError(
                    f'{path}: truncated PLY: the header announces {needed} data lines, the file has {lines}; '
                    f'{SKIP_HINT}'
                )
            return
    needed = 0
    for count, size in elements:
        if size is None:  # variable-length lists (faces): only what precedes them can be checked
            break
        needed += count * size
    if body < needed:
        raise SampleError(
            f'{path}: truncated PLY: the header announces {needed} bytes of fixed-size data, the file holds {body}; '
            f'{SKIP_HINT}'
        )


class SkipsBadSamples:
    """Mixin for map-style data sets whose ``load(index)`` may raise ``SampleError``: ``__getitem__`` re-raises it
    (``on_error='raise'``) or warns and serves the next index (``'skip'``). A data set calls ``track_skips(on_error)``
    at the end of its ``__init__``, before any DataLoader worker starts."""

    on_error: str = 'raise'
    _skip_flags: torch.Tensor | None = None  # (len,) bool in shared memory; None under on_error='raise'

    def load(self, index: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def track_skips(self, on_error: str) -> None:
        """Set ``on_error``; under 'skip', allocate the per-sample flags (``len(self)`` must be known by now)."""
        self.on_error = check_on_error(on_error)
        self._skip_flags = torch.zeros(len(self), dtype=torch.bool).share_memory_() if on_error == 'skip' else None
        self._skip_reasons: dict[int, str] = {}

    @property
    def skipped(self) -> dict[int, str]:
        """{index: reason} of the samples skipped so far, by this process or any worker."""
        if self._skip_flags is None:
            return {}
        for i in self._skip_flags.nonzero().flatten().tolist():
            if i not in self._skip_reasons:
                self._skip_reasons[i] = self._reason(i)
        return dict(sorted(self._skip_reasons.items()))

    def _reason(self, index: int) -> str:
        try:
            self.load(index)
        except SampleError as err:
            return str(err)
        return f'sample {index} failed in a data loader worker and loads now (did its file change?)'

    def __getitem__(self, index: int | tuple[int, int]) -> Any:
        """``load(index)`` (``load(i, key)`` for ``(i, key)``); under 'skip' the next readable sample, wrapping."""
        extra: tuple[int, ...] = ()
        if isinstance(index, tuple):
            first, extra = index[0], tuple(index[1:])
        else:
            first = index
        flags, n = self._skip_flags, len(self)
        if not -n <= first < n:  # what ends `for sample in dataset`; 'skip' wraps only inside the data set
            raise IndexError(f'sample index {first} is out of range for a data set of {n} samples')
        for step in range(n):
            i = (first + step) % n
            if flags is not None and flags[i]:
                continue
            try:
                return self.load(i, *extra)
            except SampleError as err:
                if flags is None:
                    raise
                flags[i] = True
                self._skip_reasons[i] = str(err)
                warnings.warn(f'skipping sample {i}: {err} ({int(flags.sum())} skipped so far)', stacklevel=2)
        raise SampleError(
            f'every one of the {n} samples failed to load; the first: {next(iter(self.skipped.values()))}'
        )


__all__ = [
    'MAX_NAMED_WARNINGS',
    'ON_ERROR',
    'SampleError',
    'SampleWarning',
    'SkipsBadSamples',
    'WarnsOnce',
    'check_on_error',
    'check_ply',
    'few_points_message',
    'finite_points',
]
