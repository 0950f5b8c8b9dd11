"""Optional dependencies, imported where they are used.

open3d serves only the point-cloud and mesh side: reading point-cloud files (``vispe.datasets.pointfiles``), the
Primitives3D and MultiViewScenes data sets and the farthest-point-sampling benchmark. ``import vispe``, the 2D
models, data sets and benchmarks, and ``tools/gpu_check.sh`` run on machines without it (a GPU machine's own
Python often lacks it), so those modules import open3d inside the functions that need it, after
``require_open3d`` has turned a missing install into one line that says what to do.
"""

from __future__ import annotations

import importlib


def require_open3d(what: str) -> None:
    """Raise ImportError naming ``what`` and the fix when open3d cannot be imported."""
    try:
        importlib.import_module('open3d')
    except ImportError as err:
        raise ImportError(
            f'{what} needs open3d, which is not installed here: pip install open3d '
            "(vispe's 2D models, data sets and benchmarks run without it)"
        ) from err


__all__ = ['require_open3d']
