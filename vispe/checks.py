"""Checks that run once per model build: builders nest (``create_model`` -> ... -> ``build_encoding``), each keeping its
checks; inside ``one_build`` a ``once_per_build`` check runs once per set of arguments."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

_Check = TypeVar('_Check', bound=Callable[..., Any])

#: the checks that passed in the build under way (None: no build under way), by check and arguments, with what
#: each returned
_PASSED: ContextVar[dict[Hashable, Any] | None] = ContextVar('vispe_passed_checks', default=None)


@contextmanager
def one_build() -> Iterator[None]:
    """The scope of one model build; a ``one_build`` opened inside another joins it."""
    if _PASSED.get() is not None:
        yield
        return
    token = _PASSED.set({})
    try:
        yield
    finally:
        _PASSED.reset(token)


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable key that tells types apart, lists, tuples and dicts recursively; TypeError otherwise."""
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return dict, tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    hash(value)
    return type(value), value


def once_per_build(*wording: str) -> Callable[[_Check], _Check]:
    """Decorator of a check (raises on a bad argument, else returns None or the normalised value): inside
    ``one_build``, a call whose arguments (but those in ``wording``) equal a passed call's returns its result
    unchecked; outside a build, or with an unhashable argument, it always checks."""

    def decorate(check: _Check) -> _Check:
        signature = inspect.signature(check)

        @functools.wraps(check)
        def once(*args: Any, **kwargs: Any) -> Any:
            passed = _PASSED.get()
            if passed is None:
                return check(*args, **kwargs)
            arguments = signature.bind(*args, **kwargs).arguments
            try:
                key = (
                    check.__module__,
                    check.__qualname__,
                    _frozen({k: arguments[k] for k in arguments if k not in wording}),
                )
            except TypeError:  # an unhashable argument: no key, so it is checked
                return check(*args, **kwargs)
            if key not in passed:
                passed[key] = check(*args, **kwargs)  # raises on a bad argument, and nothing is recorded
            return passed[key]

        return cast(_Check, once)

    return decorate


__all__ = ['once_per_build', 'one_build']
