"""Safe checkpoint loading: ``torch.load(weights_only=True)`` everywhere, with an exact allow-list of the classes of
mmengine's MessageHub (``allow_mmengine_checkpoints``), so resume works while arbitrary pickled code is refused.
Buffers are saved without their class-level statistics functions, which would need ``builtins.getattr`` on the list.
"""

from __future__ import annotations

import glob
import os.path as osp
import pickle
import re
import warnings
import zipfile
from typing import Any

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer
from torch import nn

from vispe.files import check_file, files_inside

_numpy_core = np._core if hasattr(np, '_core') else np.core  # numpy 2 renamed np.core


def mmengine_safe_globals() -> list[Any]:
    """The exact classes an mmengine checkpoint's MessageHub and vispe's RNGStateHook need."""
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


def _mmengine_local_loader(filename: str, map_location: Any = None) -> dict[str, Any]:
    return load_checkpoint(osp.expanduser(filename), map_location=map_location)


def allow_mmengine_checkpoints() -> None:
    """Make mmengine checkpoints load safely, process-wide, and route the Runner's local loading through
    ``load_checkpoint``. Idempotent; ``import vispe`` calls it."""
    from mmengine.runner.checkpoint import CheckpointLoader

    torch.serialization.add_safe_globals(mmengine_safe_globals())
    HistoryBuffer.__getstate__ = _history_buffer_state
    CheckpointLoader.register_scheme(prefixes='', loader=_mmengine_local_loader, force=True)


class CheckpointError(ValueError):
    """A file that cannot be used as a checkpoint."""


def read_checkpoint(path: str, map_location: Any = 'cpu') -> dict[str, Any]:
    """``torch.load`` of a file with weights_only=True and the allow-list; ``CheckpointError`` for a bad file."""
    check_file(path, 'checkpoint', inside=checkpoints_inside)
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


def state_dict_of(ckpt: dict[str, Any], path: str = 'checkpoint') -> dict[str, torch.Tensor]:
    """The model weights of an mmengine checkpoint ({'state_dict': ...}) or of a bare state dict."""
    state = ckpt.get('state_dict', ckpt)
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f'{path!r} has no model weights (expected a state dict of tensors)')
    return state


def _shapes(state: dict[str, Any]) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}


class StateMismatch:
    """How a checkpoint's weights differ from a model's: ``missing``, ``unexpected`` and ``mismatched`` (key -> (file
    shape, model shape)) keys; falsy when they fit."""

    def __init__(self, model_state: dict[str, Any], file_state: dict[str, Any]) -> None:
        model, file = _shapes(model_state), _shapes(file_state)
        self.missing = [k for k in model if k not in file]
        self.unexpected = [k for k in file if k not in model]
        self.mismatched = {k: (file[k], model[k]) for k in model if k in file and file[k] != model[k]}
        self.loadable = [k for k in model if k in file and file[k] == model[k]]

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched)

    def not_loaded(self) -> list[str]:
        """The model's keys a non-strict load leaves at their initial values."""
        return self.missing + list(self.mismatched)

    def describe(self, first: int = 3) -> str:
        """The first few keys of each kind of difference, then their count, in one line."""

        def part(keys: list[str], what: str, show=repr) -> str:
            more = ', ...' if len(keys) > first else ''
            plural = 's' if len(keys) != 1 else ''
            return f'{len(keys)} {what.format(s=plural)} ({", ".join(show(k) for k in keys[:first])}{more})'

        shape = lambda k: f'{k!r}: file {self.mismatched[k][0]} vs model {self.mismatched[k][1]}'  # noqa: E731
        parts = [
            part(self.missing, 'missing key{s}') if self.missing else '',
            part(self.unexpected, 'unexpected key{s}') if self.unexpected else '',
            part(list(self.mismatched), 'key{s} of another shape', shape) if self.mismatched else '',
        ]
        return ', '.join(p for p in parts if p)


#: what to do when a checkpoint does not fit; every refusal of a mismatched checkpoint ends with it
MISMATCH_HINT = (
    'Was it trained from another config (encoding, model size, image size, number of classes)? Use the config it '
    'was trained with (mmengine saves it in the work dir beside the checkpoint), or load what fits on purpose with '
    '--non-strict (load_strict=False in a config), which lists the keys it leaves unloaded'
)


def load_checkpoint(
    path: str, model: nn.Module | None = None, strict: bool = True, map_location: Any = 'cpu'
) -> dict[str, Any]:
    """The one way vispe loads a checkpoint: ``torch.load(weights_only=True)`` with an exact allow-list, so a file
    crafted to run code is refused (``CheckpointError``) before any runs. Returns the checkpoint dict.

    With ``model``, its weights are loaded into it: ``strict``, every key and shape must match, else ``CheckpointError``
    naming the differences (the model untouched); ``strict=False`` loads what fits and warns about the rest.
    """
    ckpt = read_checkpoint(path, map_location)
    if model is not None:
        load_state(model, state_dict_of(ckpt, path), strict, path)
    return ckpt


def upgrade_state(model: nn.Module, state: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """A copy of ``state`` after each submodule's ``upgrade_state(state, prefix)`` filled in or refused its entries; a
    refusal is a ValueError, or with ``path`` a ``CheckpointError`` naming the file."""
    state = dict(state)
    try:
        for prefix, module in model.named_modules():
            hook = getattr(module, 'upgrade_state', None)
            if callable(hook):
                hook(state, f'{prefix}.' if prefix else '')
    except ValueError as error:
        if path is None:
            raise
        raise CheckpointError(f'{path!r}: {error}') from None
    return state


def load_state(model: nn.Module, state: dict[str, torch.Tensor], strict: bool = True, path: str = 'checkpoint'):
    """Load ``state`` into ``model``, strictly (``CheckpointError``, model untouched) or what fits (a warning); returns
    the ``StateMismatch``."""
    state = upgrade_state(model, state, path)
    mismatch = StateMismatch(model.state_dict(), state)
    if mismatch and strict:
        raise CheckpointError(f'{path!r} does not fit this model: {mismatch.describe()}. {MISMATCH_HINT}.')
    model.load_state_dict({k: state[k] for k in mismatch.loadable} if mismatch else state, strict=not mismatch)
    if mismatch:
        warnings.warn(not_loaded_message(path, mismatch), stacklevel=2)
    return mismatch


def not_loaded_message(path: str, mismatch: StateMismatch) -> str:
    """The line a non-strict load prints: the model's keys left at their initial values and the file's unused ones."""

    def keys(names: list[str]) -> str:
        return ', '.join(names[:8]) + (', ...' if len(names) > 8 else '')

    left, unused = mismatch.not_loaded(), mismatch.unexpected + list(mismatch.mismatched)
    return (
        f"non-strict load of {path!r}: {len(left)} of the model's keys keep their initial values ({keys(left)}; "
        f'{len(mismatch.missing)} missing from the file, {len(mismatch.mismatched)} of another shape there); '
        f"{len(unused)} of the file's keys were not used ({keys(unused)})"
    )


# --- finding the last complete checkpoint --------------------------------------------------------------------------
def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a whole torch checkpoint (its zip directory reads back); no tensor is loaded."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def checkpoints_inside(directory: str) -> str:
    """The hint for a directory given as a checkpoint: its latest checkpoint, else the .pth files in it."""
    found = checkpoint_candidates(directory)
    if found:
        return f'; its latest checkpoint is {found[0]!r}' + (f' (of {len(found)})' if len(found) > 1 else '')
    return files_inside(directory, ('.pth', '.pt', '.ckpt', '.safetensors', '.bin'), 'checkpoints')


_STEP = re.compile(r'(?:epoch|iter)_(\d+)\.pth$')


def pointed_checkpoint(work_dir: str) -> tuple[str | None, str | None]:
    """(path, note) of the checkpoint ``work_dir``'s ``last_checkpoint`` names, taken from ``work_dir`` itself: a copied
    work dir's absolute pointer resolves to the same file name in ``work_dir``; nothing outside is taken."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(pointer):
        return None, None
    with open(pointer) as f:
        target = f.read().strip()
    if not target:
        return None, None
    here = osp.join(work_dir, osp.basename(target))
    if osp.isfile(here):
        return here, None
    if osp.isfile(target) and osp.realpath(osp.dirname(target)) != osp.realpath(work_dir):
        return None, f"its last_checkpoint names {target!r}, outside this work dir (another run's), which is not used"
    return None, None


def checkpoint_candidates(work_dir: str) -> list[str]:
    """The checkpoints of ``work_dir`` newest first: the pointed one, then ``epoch_N`` / ``iter_N`` by decreasing N."""
    named = []
    target, _ = pointed_checkpoint(work_dir)
    if target:
        named.append(target)
    steps = []
    for path in glob.glob(osp.join(glob.escape(work_dir), '*.pth')):
        match = _STEP.search(osp.basename(path))
        if match:
            steps.append((int(match.group(1)), path))
    ordered = named + [path for _, path in sorted(steps, reverse=True)]
    return list(dict.fromkeys(ordered))


def latest_checkpoint(work_dir: str) -> str | None:
    """The complete checkpoint to resume from in ``work_dir`` (the pointed one, else the highest N), or None."""
    return next((path for path in checkpoint_candidates(work_dir) if is_complete_checkpoint(path)), None)


def find_resume_checkpoint(work_dir: str) -> tuple:
    """(path, checkpoint, skipped) for the newest checkpoint that reads back whole (None, None, skipped if none);
    ``skipped`` lists (path, reason)."""
    _, outside = pointed_checkpoint(work_dir)
    skipped = [(osp.join(work_dir, 'last_checkpoint'), outside)] if outside else []
    for path in checkpoint_candidates(work_dir):
        if not is_complete_checkpoint(path):
            skipped.append((path, 'incomplete: not a whole zip archive (a write that was cut short)'))
            continue
        try:
            return path, read_checkpoint(path), skipped
        except (CheckpointError, OSError) as err:
            skipped.append((path, str(err)))
    return None, None, skipped
