"""Bad samples on disk: errors that name the file and what is wrong, or skipping them when the config asks.

Readers raise ``SampleError`` (a ValueError) for a file they cannot use: an image PIL cannot decode (corrupt or
truncated), a .ply file shorter than its header says, points with NaN / Inf coordinates. A data set built with
``on_error='skip'`` (``SkipsBadSamples``) instead warns once per file, serves the next readable sample, and keeps
the skipped files in ``skipped``; vispe's ``SkippedSamplesHook`` reports the count after each epoch. With
``num_workers > 0`` each worker process keeps its own count (their warnings all reach the log).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

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
    """A sample file that cannot be used; the message names the file and the problem."""


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
    """SampleError when a .ply file is shorter than its header promises (a truncated download or copy): open3d
    reads such files without an error, filling the missing points with zeros. Binary files are checked by size
    (the vertex block, or every element when all have fixed-size properties), ASCII files by line count."""
    with open(path, 'rb') as f:
        if f.readline().strip() != b'ply':
            raise SampleError(f'{path}: not a PLY file (no "ply" magic line); {SKIP_HINT}')
        fmt, elements, header = None, [], 0
        for raw in f:
            line = raw.decode('ascii', 'replace').split()
            if not line:
                continue
            if line[0] == 'format':
                fmt = line[1]
            elif line[0] == 'element':
                elements.append([int(line[2]), 0])  # count, bytes per item (None: variable)
            elif line[0] == 'property' and elements:
                element = elements[-1]
                if line[1] == 'list':
                    element[1] = None
                elif element[1] is not None:
                    element[1] += PLY_SIZES.get(line[1], 0)  # an unknown type counts 0: never a false alarm
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
    (``on_error='raise'``) or warns, records the file in ``skipped`` and serves the next index (``'skip'``)."""

    on_error: str = 'raise'

    def load(self, index: int) -> Any:
        raise NotImplementedError

    @property
    def skipped(self) -> dict:
        """{index: reason} of the samples skipped so far in this process."""
        if '_skipped' not in self.__dict__:
            self._skipped = {}
        return self._skipped

    def __getitem__(self, index: int) -> Any:
        """``load(index)``; under ``on_error='skip'`` the first readable sample from ``index`` on (wrapping around)."""
        n = len(self)
        for step in range(n):
            i = (index + step) % n
            if i in self.skipped:
                continue
            try:
                return self.load(i)
            except SampleError as err:
                if self.on_error != 'skip':
                    raise
                self.skipped[i] = str(err)
                warnings.warn(f'skipping sample {i}: {err} ({len(self.skipped)} skipped so far)', stacklevel=2)
        first = next(iter(self.skipped.values()))
        raise SampleError(f'every one of the {n} samples failed to load; the first: {first}')


__all__ = [
    'ON_ERROR',
    'SampleError',
    'SkipsBadSamples',
    'check_on_error',
    'check_ply',
    'finite_points',
]
