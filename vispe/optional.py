"""Optional dependencies: open3d (``pip install open3d``, or ``pip install '.[3d]'`` in a vispe checkout), imported only
inside the functions that need it, after ``require_open3d``."""

from __future__ import annotations

import importlib

#: the extra that adds open3d (setup.py), and the commands that install open3d: its own, or the extra's from a checkout
THREE_D_EXTRA = '3d'
THREE_D_INSTALL = f"pip install open3d (in a vispe checkout: pip install '.[{THREE_D_EXTRA}]')"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line naming the extra that installs it."""


def require_open3d(what: str) -> None:
    """Return when open3d imports; else raise ``MissingExtra`` naming ``what`` and the extra to install."""
    try:
        importlib.import_module('open3d')
    except ImportError as err:
        raise MissingExtra(
            f'{what} needs open3d, which is not installed here: {THREE_D_INSTALL}; '
            "vispe's 2D models, data sets and benchmarks run without it"
        ) from err


__all__ = ['THREE_D_EXTRA', 'THREE_D_INSTALL', 'MissingExtra', 'require_open3d']
