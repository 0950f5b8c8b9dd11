"""Optional dependencies, imported where they are used.

open3d serves only the point-cloud and mesh side: reading point-cloud files (``vispe.datasets.pointfiles``), the
Primitives3D, ModelNet40 and MultiViewScenes data sets and the farthest-point-sampling benchmark
(``vispe.bench.fps``). ``pip install vispe`` leaves it out; ``pip install 'vispe[3d]'`` (or ``[points]``,
``[cameras]``) adds it. ``import vispe``, ``vispe.datasets`` (whose 3D data sets stay registered), the 2D models,
data sets, training, sweeps and benchmarks, and ``tools/gpu_check.sh`` run on machines without it (a GPU machine's
own Python often lacks it): those modules import open3d inside the functions that need it, after ``require_open3d``
has turned a missing install into ``MissingExtra``, one line that names the extra to install. The ``vispe``
command prints that line alone (``vispe.cli.main``).
"""

from __future__ import annotations

import importlib

#: the extra that adds open3d, and the command that installs it
THREE_D_EXTRA = '3d'
THREE_D_INSTALL = f"pip install 'vispe[{THREE_D_EXTRA}]'"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line naming the extra that installs it."""


def require_open3d(what: str) -> None:
    """Return when open3d imports; else raise ``MissingExtra`` naming ``what`` and the extra to install."""
    try:
        importlib.import_module('open3d')
    except ImportError as err:
        raise MissingExtra(
            f'{what} needs open3d, which is not installed here: {THREE_D_INSTALL} (or pip install open3d); '
            "vispe's 2D models, data sets and benchmarks run without it"
        ) from err


__all__ = ['THREE_D_EXTRA', 'THREE_D_INSTALL', 'MissingExtra', 'require_open3d']
