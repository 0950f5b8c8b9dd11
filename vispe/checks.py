"""Checks that run once per model build.

A build nests builders: ``create_model`` calls timm's builder, which calls ``VisionTransformerPE.__init__``, which
converts the model (``apply_encoding``), which builds the encodings of every layer (``build_backbone_encodings``,
``build_encoding``), each encoding and attention layer checking its own arguments. Every builder is also an entry
point of its own, so each keeps its checks; ``one_build`` makes them run once: the outermost builder opens the
build's scope, the builders inside it join that scope, and a check decorated with ``once_per_build`` runs the first
time it meets a set of arguments (at the outermost builder, which checks first) and is not run again for the same
arguments by the layers built inside. Outside a build every call checks.
"""

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
    """The scope of one model build (the module docstring): the outermost ``one_build`` holds the build, one opened
    inside it joins it. Inside, each ``once_per_build`` check runs once per set of arguments."""
    if _PASSED.get() is not None:
        yield
        return
    token = _PASSED.set({})
    try:
        yield
    finally:
        _PASSED.reset(token)


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable key that tells types apart (224 and 224.0 are different arguments to a check);
    lists, tuples and dicts recursively. A TypeError for anything else unhashable."""
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return dict, tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    hash(value)
    return type(value), value


def once_per_build(*wording: str) -> Callable[[_Check], _Check]:
    """Decorator of a check (a function that raises on a bad argument and otherwise returns None or the value it
    normalised): inside ``one_build``, a call whose arguments equal those of a call that passed, the arguments named
    in ``wording`` aside (those that only word its message, such as ``owner``), returns what that call returned
    without checking again. Outside a build, or with an argument that cannot be a key, it checks every time."""

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
