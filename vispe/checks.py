"""Deprecated: a model build needs no scope. vispe's argument checks cost microseconds and run wherever they are
called; the outermost builder checks first, so its name is the one an error gives."""

from __future__ import annotations

import contextlib
import warnings


class one_build(contextlib.ContextDecorator):
    """Does nothing, with a DeprecationWarning: remove ``@one_build()`` from a backbone's ``__init__``."""

    def __init__(self) -> None:
        warnings.warn('vispe.checks.one_build is deprecated and does nothing: remove it', DeprecationWarning, 2)

    def __enter__(self) -> one_build:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


__all__ = ['one_build']
