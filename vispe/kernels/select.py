"""How a fused kernel family picks its backend per call: a backend forced for eager calls (environment variable or
context manager), the Triton module imported once where installed, and a once-per-device check of the Triton kernel
against its reference, so a kernel that fails on some GPU costs speed there, never a wrong number."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx


class ForcedBackend:
    """The backend forced for eager calls: ``env`` at import, else None; ``use(name)`` forces one inside a block."""

    def __init__(self, family: str, backends: tuple[str, ...], env: str) -> None:
        self.family, self.backends, self.env = family, backends, env
        self.name: str | None = os.environ.get(env) or None
        self.check(self.name)

    def check(self, name: str | None) -> None:
        if name is not None and name not in self.backends:
            raise ValueError(
                f'{self.family} backend must be one of {self.backends} (or None: chosen per call), got {name!r}'
                + (f'; check {self.env}' if name == os.environ.get(self.env) else '')
            )

    def choose(
        self, x: torch.Tensor, launch: Callable[[], Any], works: Callable[[torch.device], bool], fallback: str
    ) -> str:
        """The backend of a call on ``x``: ``torch`` when compiling, exporting or FX-tracing; else the forced one; else
        ``triton`` where the module takes the dtype and the kernel ``works`` on the device; else ``fallback``."""
        if isinstance(x, torch.fx.Proxy) or torch.compiler.is_compiling():
            return 'torch'
        if self.name is not None:
            return self.name
        if x.is_cuda:
            module = launch()
            if module is not None and x.dtype in module.KERNEL_DTYPES and works(x.device):
                return 'triton'
        return fallback

    @contextlib.contextmanager
    def use(self, name: str | None) -> Iterator[None]:
        self.check(name)
        previous, self.name = self.name, name
        try:
            yield
        finally:
            self.name = previous


@functools.cache
def triton_module(name: str) -> Any:
    """``vispe.kernels.<name>``, or None where Triton is not installed (looked up once)."""
    try:
        return importlib.import_module(f'vispe.kernels.{name}')
    except ImportError:
        return None


def jitted(fn: Callable[..., Any], interpret: bool) -> Any:
    """``fn`` compiled by ``triton.jit``, or for CPU tensors run by Triton's interpreter; callers cache it per
    ``interpret``."""
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(fn)
    import triton

    return triton.jit(fn)


def probe_kernel(what: str, device: torch.device, check: Callable[[], bool], fallback: str, env: str) -> bool:
    """Run ``check`` on ``device``; True when the kernel agrees, else one RuntimeWarning naming the error and
    ``fallback``, and False."""
    try:
        works = check()
        why = 'its result differs from the reference'
    except Exception as err:  # a compilation or launch failure: report it, keep the model running
        works, why = False, f'{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ""}'
    if not works:
        warnings.warn(
            f"vispe's Triton {what} kernel does not work on {device} ({why}); {fallback} there instead (correct, "
            f'slower). Set {env} to skip the kernel and this check, or report the error with your torch and triton '
            'versions.',
            RuntimeWarning,
            stacklevel=4,
        )
    return works


__all__ = ['ForcedBackend', 'jitted', 'probe_kernel', 'triton_module']
