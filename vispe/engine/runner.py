"""``VispeRunner``: mmengine's Runner with the guarantees vispe's tools promise (``runner_type = 'VispeRunner'``).

* Strict loading: ``load_from`` and resumes load only a checkpoint that fits the model, else ``CheckpointError``;
  ``load_strict = False`` (``--non-strict``) loads what fits and logs the rest.
* A protected work dir: a training run locks it (``WorkDirLock``); a fresh run refuses one holding another run's
  checkpoints unless ``overwrite_work_dir = True``, which moves them into ``replaced-<time>/``.
* Resume that never half-happens: the newest checkpoint that reads back whole is checked (a training state, weights,
  optimizer groups and schedulers that fit) before anything in the work dir is written; the config is written after it
  loads, and a user's own file of the same name is refused.
* Schedules that fit the run (``vispe.engine.schedules``).
"""

from __future__ import annotations

import inspect
import os
import os.path as osp
import warnings
from typing import Any

import torch
from mmengine.dist import master_only
from mmengine.model import is_model_wrapper
from mmengine.runner import Runner
from mmengine.runner.base_loop import BaseLoop
from mmengine.runner.checkpoint import _load_checkpoint
from torch import nn

from vispe.engine.atomic import atomic_write
from vispe.engine.checkpoint import (
    CheckpointError,
    checkpoint_candidates,
    find_resume_checkpoint,
    latest_checkpoint,
    load_state,
    not_loaded_message,
    read_checkpoint,
)
from vispe.engine.config import model_config_error
from vispe.engine.resume import check_resumable, has_training_state, revised
from vispe.engine.run_meta import align_training_grid
from vispe.engine.schedules import RunLength, check_schedule_fits, fit_schedules
from vispe.engine.workdir import (
    CONFIG_DUMP_MARK,
    WorkDirError,
    WorkDirLock,
    check_work_dir,
    config_dump_conflict,
    set_aside,
    similar_dirs,
    takeover_message,
)
from vispe.registry import RUNNERS

_RANK_VARIABLES = {'pytorch': 'RANK', 'slurm': 'SLURM_PROCID', 'mpi': 'OMPI_COMM_WORLD_RANK'}


def _is_main_process(launcher: str) -> bool:
    """Rank 0, read before the process group exists (the lock is taken before the Runner sets it up)."""
    variable = _RANK_VARIABLES.get(launcher)
    return variable is None or int(os.environ.get(variable, '0')) == 0


@RUNNERS.register_module()
class VispeRunner(Runner):
    """mmengine's ``Runner`` with the module's guarantees; reads ``load_strict`` (default True) and
    ``overwrite_work_dir`` (default False) from ``cfg``.

    Args:
        *args: passed to mmengine's ``Runner``.
        **kwargs: passed to mmengine's ``Runner``; ``work_dir`` is checked and, for a training run, locked first.
    """

    def __init__(self, *args, **kwargs) -> None:
        bound = inspect.signature(Runner.__init__).bind(None, *args, **kwargs)
        arguments = bound.arguments
        cfg = arguments.get('cfg') or {}
        work_dir = arguments['work_dir']
        self._load_strict = bool(cfg.get('load_strict', True))
        self._preloaded: dict[str, dict] = {}
        self._notices: list[str] = []
        self._config_dumped = False
        self._resuming = False
        self._lock: WorkDirLock | None = None
        check_work_dir(work_dir)
        if arguments.get('train_cfg') is not None:  # a training run: the work dir is its own
            conflict = config_dump_conflict(work_dir, cfg)
            if conflict:
                raise WorkDirError(conflict)
            resume, load_from = self._plan_start(
                work_dir,
                bool(arguments.get('resume', False)),
                arguments.get('load_from'),
                arguments['model'],
                cfg,
                arguments.get('optim_wrapper'),
                arguments.get('param_scheduler'),
            )
            arguments['resume'], arguments['load_from'] = resume, load_from
            if _is_main_process(arguments.get('launcher', 'none')):
                self._lock = WorkDirLock(work_dir)
                previous = self._lock.acquire()
                if previous:
                    self._notices.append(takeover_message(work_dir, previous))
                replaced = checkpoint_candidates(work_dir) if not resume and cfg.get('overwrite_work_dir') else []
                if replaced:
                    self._notices.append(set_aside(work_dir, replaced))
        try:
            super().__init__(*bound.args[1:], **bound.kwargs)
        except BaseException:
            self.release_work_dir()
            raise
        for notice in self._notices:
            self.logger.warning(notice)

    # --- before anything is written ------------------------------------------------------------------------------
    def _plan_start(self, work_dir, resume, load_from, model, cfg, optim_wrapper, param_scheduler) -> tuple[bool, Any]:
        """(resume, load_from) for this training run after the module's checks; raises on a refusal."""
        if not resume:
            existing = checkpoint_candidates(work_dir) if osp.isdir(work_dir) else []
            if existing and not cfg.get('overwrite_work_dir', False):
                names = ', '.join(osp.basename(p) for p in existing[:3]) + (', ...' if len(existing) > 3 else '')
                raise WorkDirError(
                    f'work dir {work_dir!r} already holds the checkpoints of a run ({names}); continue that run with '
                    '--resume, train into another --work-dir, or pass --overwrite (overwrite_work_dir=True) to '
                    'replace them'
                )
            return False, load_from
        path, ckpt, skipped = find_resume_checkpoint(work_dir) if osp.isdir(work_dir) else (None, None, [])
        for bad, why in skipped:
            fallback = f'resuming from the older {osp.basename(path)} instead' if path else 'no older one reads back'
            self._notices.append(f'checkpoint {bad} cannot be resumed from ({why}); {fallback}')
        if path is None and not osp.isdir(work_dir):
            raise WorkDirError(
                f'--resume: work dir {work_dir!r} does not exist, so there is no run to continue'
                f'{similar_dirs(work_dir)}; check the path, or drop --resume to start a new run there'
            )
        if path is None and skipped:  # checkpoints that do not read: a new run would write over them
            reasons = '; '.join(f'{bad}: {why}' for bad, why in skipped[:3])
            raise CheckpointError(
                f'--resume: no checkpoint in work dir {work_dir!r} reads back ({reasons}); nothing was changed. '
                'Remove or replace the broken files, or train into another --work-dir'
            )
        if path is None and load_from:
            ckpt = read_checkpoint(load_from)
            if not has_training_state(ckpt):
                self._notices.append(
                    f'--resume: work dir {work_dir!r} holds no complete checkpoint yet; starting a new run from the '
                    f'weights of load_from={load_from!r}'
                )
                return False, load_from
            path = load_from
            self._notices.append(
                f'--resume: work dir {work_dir!r} holds no checkpoint yet; resuming load_from={path!r}'
            )
        if path is None:
            self._notices.append(
                f'--resume: work dir {work_dir!r} holds no complete checkpoint yet (the run stopped before its first '
                'save, or never ran); starting a new run'
            )
            return False, load_from
        self._notices += check_resumable(path, ckpt, model, cfg, optim_wrapper, param_scheduler)
        self._preloaded[path] = ckpt
        return True, path

    def build_model(self, model: Any) -> nn.Module:
        """mmengine's ``build_model``; a config the model refuses raises ``ConfigError``."""
        try:
            return super().build_model(model)
        except (ValueError, TypeError, KeyError) as err:
            raise model_config_error(err) from err

    # --- loading ----------------------------------------------------------------------------------------------------
    def load_checkpoint(
        self,
        filename: str,
        map_location: Any = 'cpu',
        strict: bool | None = None,
        revise_keys: list = [(r'^module\.', '')],  # noqa: B006 (mmengine's signature)
    ) -> dict:
        """mmengine's ``load_checkpoint``, strict unless ``load_strict = False`` (resumes always); outside training,
        the encodings' training grid then follows what the checkpoint's run trained on."""
        strict = True if self._resuming else (self._load_strict if strict is None else strict)
        checkpoint = self._preloaded.pop(filename, None) or _load_checkpoint(filename, map_location=map_location)
        if isinstance(checkpoint.get('meta'), dict):  # mmengine's resume runs meta['config'] as Python: never
            checkpoint['meta'].pop('config', None)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        model = self.model.module if is_model_wrapper(self.model) else self.model
        state = checkpoint.get('state_dict', checkpoint)
        if not isinstance(state, dict):
            raise CheckpointError(f'{filename!r} has no model weights (expected a state dict of tensors)')
        state = revised({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, revise_keys)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # the not-loaded keys go to the log instead
            mismatch = load_state(model, state, strict, filename)
        if mismatch:
            self.logger.warning(not_loaded_message(filename, mismatch))
        if not isinstance(self._train_loop, BaseLoop):  # a test or val run: strategies scale from the checkpoint's run
            for note in align_training_grid(model, self.cfg, checkpoint.get('meta') or {}):
                self.logger.warning(f'{filename}: {note}')
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint

    def resume(self, filename: str, *args, **kwargs) -> None:
        self._resuming = True
        try:
            super().resume(filename, *args, **kwargs)
        finally:
            self._resuming = False

    def load_or_resume(self) -> None:
        super().load_or_resume()
        if not self._config_dumped:
            self._config_dumped = True
            self._dump_config(training=isinstance(self._train_loop, BaseLoop))

    # --- writing ----------------------------------------------------------------------------------------------------
    def dump_config(self) -> None:
        """Deferred until the checkpoint has loaded (``load_or_resume``)."""

    @master_only
    def _dump_config(self, training: bool) -> None:
        """The config in the work dir (training) or in the run's log folder (test and val runs)."""
        name = osp.basename(self.cfg.filename) if self.cfg.filename else f'{self.timestamp}.py'
        if not training:
            self.cfg.dump(osp.join(self.log_dir, name))
            return
        conflict = config_dump_conflict(self.work_dir, self.cfg)  # a file that appeared since the run started
        if conflict:
            raise WorkDirError(conflict)
        atomic_write(osp.join(self.work_dir, name), f'{CONFIG_DUMP_MARK}\n{self.cfg.pretty_text}')

    # --- the environment dump after the data sets -----------------------------------------------------------------
    def _log_env(self, env_cfg: dict) -> None:
        """Deferred until the first loop has built its data, so a data set's error is not buried under the log."""
        self._env_cfg: dict | None = env_cfg

    def _log_env_now(self) -> None:
        env_cfg, self._env_cfg = getattr(self, '_env_cfg', None), None
        if env_cfg is not None:
            super()._log_env(env_cfg)

    def build_train_loop(self, loop):
        built = super().build_train_loop(loop)  # builds the training data set: its errors come first
        self._log_env_now()
        return built

    def build_val_loop(self, loop):
        built = super().build_val_loop(loop)
        self._log_env_now()
        return built

    def build_test_loop(self, loop):
        built = super().build_test_loop(loop)
        self._log_env_now()
        return built

    def build_param_scheduler(self, scheduler):
        if not isinstance(self._train_loop, BaseLoop):
            return super().build_param_scheduler(scheduler)
        run = RunLength(self.max_epochs, self.max_iters)
        built = super().build_param_scheduler(fit_schedules(scheduler, run, self.logger.warning))
        schedulers = built if isinstance(built, list) else [s for group in built.values() for s in group]
        for index, one in enumerate(schedulers):
            check_schedule_fits(index, one, run)
        return built

    def train(self) -> nn.Module:
        try:
            return super().train()
        finally:
            self.release_work_dir()

    def release_work_dir(self) -> None:
        """Free the work dir's lock (``train()`` does when it ends, however it ends)."""
        if self._lock is not None:
            self._lock.release()


def build_runner(cfg) -> Runner:
    """The Runner a config asks for (``runner_type``, mmengine's convention), else ``VispeRunner``."""
    if cfg.get('runner_type'):
        return RUNNERS.build(cfg)
    return VispeRunner.from_cfg(cfg)


def interrupted_message(config: str, cfg: Any, args: Any, command: str = 'vispe train') -> str:
    """The line training ends with on Ctrl-C: the last complete checkpoint and how to resume with ``command``."""
    work_dir = cfg.work_dir if cfg is not None else None
    last = latest_checkpoint(work_dir) if work_dir and osp.isdir(work_dir) else None
    again = f'{command} {config} --work-dir {work_dir} --resume'
    extra = ' '.join(f'{k}={v}' for k, v in (getattr(args, 'cfg_options', None) or {}).items())
    again += f' --cfg-options {extra}' if extra else ''
    if last:
        return f'interrupted: the last complete checkpoint is {last}; continue with: {again}'
    return f'interrupted before the first checkpoint was saved; nothing to resume in {work_dir} yet'


__all__ = [
    'VispeRunner',
    'build_runner',
    'interrupted_message',
]
