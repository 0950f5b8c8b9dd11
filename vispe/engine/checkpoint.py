"""Safe checkpoint loading: ``torch.load(weights_only=True)`` everywhere, with an exact allow-list.

mmengine 0.10.7 stores its MessageHub (``HistoryBuffer`` objects holding numpy arrays) in every checkpoint
and resumes with ``torch.load``'s defaults, which torch >= 2.6 refuses. ``allow_mmengine_checkpoints``
allow-lists exactly those classes, so resume works while arbitrary pickled code is still refused.

``HistoryBuffer.__getstate__`` also pickles its class-level table of statistics functions, which would need
``builtins.getattr`` on the allow-list (a far wider door than a class). Those functions are registered again
when their code is imported, so vispe saves buffers without them; mmengine's ``__setstate__`` already
treats them as optional.
"""

from __future__ import annotations

import glob
import os
import os.path as osp
import pickle
import re
import zipfile
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer
from torch import nn

_numpy_core = np._core if hasattr(np, '_core') else np.core  # numpy 2 renamed np.core


def mmengine_safe_globals() -> List[Any]:
    """The exact classes an mmengine checkpoint's MessageHub needs (numpy arrays of floats and ints), and numpy's
    random state (a uint32 array) that vispe's RNGStateHook stores."""
    return [
        HistoryBuffer,
        np.ndarray,
        np.dtype,
        np.dtypes.Float64DType,
        np.dtypes.Float32DType,
        np.dtypes.Int64DType,
        np.dtypes.UInt32DType,  # numpy's random state (RNGStateHook)
        _numpy_core.multiarray._reconstruct,
        _numpy_core.multiarray.scalar,
    ]


def _history_buffer_state(self: HistoryBuffer) -> dict:
    """HistoryBuffer state without the class-level statistics functions (and without mutating __dict__)."""
    state = dict(self.__dict__)
    state.pop('statistics_methods', None)
    return state


def _mmengine_local_loader(filename: str, map_location: Any = None) -> Dict[str, Any]:
    """mmengine's loader for local paths (Runner ``load_from`` / ``resume``), replaced by vispe's."""
    return load_checkpoint(osp.expanduser(filename), map_location=map_location)


def allow_mmengine_checkpoints() -> None:
    """Make mmengine checkpoints load safely, process-wide: allow-list the exact classes, save HistoryBuffers
    without function references, and route mmengine's local checkpoint loading (the Runner's ``load_from`` and
    ``resume``) through ``load_checkpoint``. Idempotent; called by ``import vispe``."""
    from mmengine.runner.checkpoint import CheckpointLoader

    torch.serialization.add_safe_globals(mmengine_safe_globals())
    HistoryBuffer.__getstate__ = _history_buffer_state
    CheckpointLoader.register_scheme(prefixes='', loader=_mmengine_local_loader, force=True)


class CheckpointError(ValueError):
    """A file that cannot be used as a checkpoint."""


def read_checkpoint(path: str, map_location: Any = 'cpu') -> Dict[str, Any]:
    """torch.load a file with weights_only=True and the mmengine allow-list; clear errors for bad files. The reader
    behind ``load_checkpoint``, which is what code outside this module calls."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'checkpoint {path!r} does not exist')
    # process-wide, not torch's safe_globals() context: leaving that context removes the entries for everyone
    allow_mmengine_checkpoints()
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        msg = str(err)
        detail = next(
            (
                line.strip()
                for line in msg.splitlines()
                if any(w in line for w in ('GLOBAL', 'Can only', 'unrecognized', 'blocked'))
            ),
            '',
        )
        if detail:  # torch refused an object outside the allow-list
            raise CheckpointError(
                f'{path!r} holds objects outside the allow-list and was not loaded (weights_only=True keeps pickled '
                f'code from running): {detail.split(". Please use")[0]}'
            ) from None
        last = [line for line in msg.splitlines() if line.strip()]
        raise CheckpointError(f'{path!r} is not a PyTorch checkpoint ({last[-1] if last else err})') from None
    except Exception as err:  # torch.load raises many types on foreign or truncated files
        raise CheckpointError(
            f'{path!r} is not a PyTorch checkpoint (torch.load failed: {type(err).__name__}: {err})'
        ) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f'{path!r} holds a {type(ckpt).__name__}, not a checkpoint dict or state dict')
    return ckpt


def state_dict_of(ckpt: Dict[str, Any], path: str = 'checkpoint') -> Dict[str, torch.Tensor]:
    """The model weights of an mmengine checkpoint ({'state_dict': ...}) or of a bare state dict."""
    state = ckpt.get('state_dict', ckpt)
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f'{path!r} has no model weights (expected a state dict of tensors)')
    return state


def load_checkpoint(
    path: str, model: Optional[nn.Module] = None, strict: bool = True, map_location: Any = 'cpu'
) -> Dict[str, Any]:
    """The one way vispe loads a checkpoint (``vispe.load_checkpoint``; the Runner's resume and ``load_from`` and
    every tool come here): ``torch.load(weights_only=True)`` with an exact allow-list, so a file crafted to run
    code when unpickled is refused (``CheckpointError``) before any of it runs. With ``model``, its weights are
    loaded into it (``strict``: every key must match). Returns the checkpoint dict."""
    ckpt = read_checkpoint(path, map_location)
    if model is not None:
        state = state_dict_of(ckpt, path)
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # shape mismatches raise even with strict=False
            raise CheckpointError(f'{path!r} does not fit this model: {err}') from None
        if strict and (missing or unexpected):
            raise CheckpointError(
                f'{path!r} does not fit this model: missing keys {missing[:5]}{"..." if len(missing) > 5 else ""}, '
                f'unexpected keys {unexpected[:5]}{"..." if len(unexpected) > 5 else ""}. Was it trained from another '
                'config (encoding, model size)?'
            )
    return ckpt


# --- writing: atomic files and finding the last complete checkpoint ------------------------------------------------
#: infix of the hidden temporary files ``atomic_write`` renames into place: '.epoch_3.pth.partial-<pid>'
PARTIAL = '.partial-'


def partial_path(path: str) -> str:
    """The hidden temporary file beside ``path`` that this process writes before renaming it to ``path``."""
    directory, name = osp.split(osp.abspath(path))
    return osp.join(directory, f'.{name}{PARTIAL}{os.getpid()}')


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_open(path: str, mode: str = 'w', **kwargs) -> Iterator[Any]:
    """``open(path, mode)`` for writing whose result appears all at once: the data goes to a hidden temporary file
    beside ``path``, is flushed to disk, and is renamed over ``path`` when the block ends without an error. A
    process killed at any moment leaves ``path`` as it was (old contents, or absent), never half written."""
    if not any(c in mode for c in 'wx'):
        raise ValueError(f'atomic_open writes whole files (mode w or wb), got mode {mode!r}')
    tmp = partial_path(path)
    os.makedirs(osp.dirname(tmp), exist_ok=True)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_dir(osp.dirname(tmp))


def atomic_write(path: str, data: Union[bytes, str], encoding: str = 'utf-8') -> None:
    """Write ``data`` (bytes, or text in ``encoding``) to ``path`` atomically (``atomic_open``)."""
    with atomic_open(path, 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode(encoding))


def remove_partial_files(directory: str) -> List[str]:
    """Delete the temporary files that killed writers left in ``directory``; returns their paths."""
    stale = glob.glob(osp.join(glob.escape(directory), f'.*{PARTIAL}*'))
    for path in stale:
        try:
            os.remove(path)
        except OSError:
            pass
    return stale


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a whole torch checkpoint: a zip archive whose central directory (written last) reads
    back. Cheap: no tensor is loaded."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


_STEP = re.compile(r'(?:epoch|iter)_(\d+)\.pth$')


def latest_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint to resume from in ``work_dir``: the one ``last_checkpoint`` names when it is complete, else
    the complete ``epoch_N.pth`` / ``iter_N.pth`` with the highest N; None when there is none."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named and is_complete_checkpoint(named):
            return named
    steps = []
    for path in glob.glob(osp.join(glob.escape(work_dir), '*.pth')):
        match = _STEP.search(osp.basename(path))
        if match and is_complete_checkpoint(path):
            steps.append((int(match.group(1)), path))
    return max(steps)[1] if steps else None
