"""What the camera recorders (record_gta.py, record_prope.py, record_petr.py, record_3dppe.py, record_plucker.py)
share: loading a reference's file under its package name, stand-ins for the imports its module makes but the
recorded function does not use (mmcv, mmdet3d, cv2, decord, ...), so that the authors' code runs without their
training stack, and the random camera poses they record.

A stand-in module answers every name with ``StandIn`` (a base class, a registry, a decorator that returns what it
decorates, a function that returns itself), except the names given in ``overrides`` (e.g. mmcv.cnn's ``Linear``,
which the recorded layers are built from and which mmcv itself defines as torch's). Nothing the recorded function
computes comes from a stand-in: each recorder says which of its imports are stood in for and why.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

import torch


class _Permissive(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith('__'):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: give back what it decorates
        return cls


class StandIn(metaclass=_Permissive):
    """Any name of a stood-in module: subclassable, callable, every attribute itself."""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefixes: Iterable[str], files: Mapping[str, str], overrides: Mapping[str, dict]) -> None:
        self.prefixes, self.files, self.overrides = tuple(prefixes), dict(files), dict(overrides)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name in self.files:
            return importlib.util.spec_from_file_location(name, self.files[name])
        if any(name == p or name.startswith(p + '.') for p in self.prefixes):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__dict__.update(self.overrides.get(spec.name, {}))

        def __getattr__(attr: str) -> Any:  # noqa: N807 (PEP 562: a module's fallback for missing names)
            if attr.startswith('__'):
                raise AttributeError(attr)
            return StandIn

        module.__dict__['__getattr__'] = __getattr__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install(
    stand_ins: Iterable[str] = (), files: Mapping[str, str] | None = None, overrides: Mapping[str, dict] | None = None
) -> None:
    """Stand-in modules for every module named in ``stand_ins`` or under it, and the reference's own ``files``
    (module name -> path) loaded under their names (so their relative imports resolve)."""
    sys.meta_path.insert(0, _Finder(stand_ins, files or {}, overrides or {}))


def random_poses(generator: torch.Generator, n: int) -> torch.Tensor:
    """(n, 4, 4) rigid camera-to-world poses: a rotation from a QR factorisation (det +1), a translation ~ N(0, 2)."""
    q, r = torch.linalg.qr(torch.randn(n, 3, 3, generator=generator))
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    q[torch.linalg.det(q) < 0, :, 0] *= -1
    poses = torch.eye(4).repeat(n, 1, 1)
    poses[:, :3, :3], poses[:, :3, 3] = q, 2 * torch.randn(n, 3, generator=generator)
    return poses


def sha256(path: str) -> str:
    """The sha256 of a reference file, recorded beside its outputs."""
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


__all__ = ['StandIn', 'install', 'random_poses', 'sha256']
