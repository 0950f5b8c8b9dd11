"""``VispeRunner``: mmengine's Runner with the guarantees vispe's tools promise (configs pick it with
``runner_type = 'VispeRunner'``, which ``configs/_base_/default_runtime.py`` sets; the tools always use it).

* Strict loading. ``load_from`` (and every resume) loads only a checkpoint whose keys and shapes match the model,
  else ``CheckpointError`` naming the missing, unexpected and mis-shaped keys. ``load_strict = False`` in a config
  (``--non-strict`` in the tools) loads what fits and logs which keys were left at their initial values.
* A protected work dir. A training run holds an exclusive lock on its work dir (``WorkDirLock``) from construction
  to the end of ``train()``; a second run is refused naming the holder. A fresh run refuses a work dir that holds
  another run's checkpoints unless ``overwrite_work_dir = True`` (``--overwrite``). A work dir that is a file or
  cannot be written is refused before anything is written.
* Resume that never half-happens. ``resume=True`` picks the work dir's newest checkpoint that reads back whole (an
  unreadable newer one is named in the log) and checks, before anything in the work dir is written, that it holds
  a training state (not weights only), that its weights fit the model the config builds, and that the optimizer's
  parameter groups and the parameter schedulers match; a refusal names what differs between the checkpoint's
  config and this one. The config is written to the work dir only after the checkpoint has loaded (mmengine writes
  it first); test and val runs write theirs into their timestamped log folder, never over the training run's.
  The training run's copy (``<work_dir>/<config basename>``) starts with ``CONFIG_DUMP_MARK``; a file of that name
  that lacks the mark and is not this very config (a user's own file) is refused before anything is written.
* Schedules that fit the run. A parameter scheduler that ends after the run's last epoch or iteration (its
  ``end`` set for a longer run) is refused; schedulers without ``end`` follow the run's length (mmengine fills
  it in), which is how vispe's schedule configs are written. A run shorter than its warm-up still trains: the
  warm-up is clipped to the run (same ramp, cut where the run ends) and a scheduler that would begin after the run's
  end is left out, each said in one log line.
"""

from __future__ import annotations

import copy
import inspect
import os
import os.path as osp
import re
import warnings
from typing import Any

import torch
from mmengine.config import Config
from mmengine.dist import master_only
from mmengine.model import is_model_wrapper
from mmengine.optim import build_optim_wrapper
from mmengine.optim.scheduler.param_scheduler import INF
from mmengine.runner import Runner
from mmengine.runner.base_loop import BaseLoop
from mmengine.runner.checkpoint import _load_checkpoint
from torch import nn

from vispe.engine.checkpoint import (
    CheckpointError,
    StateMismatch,
    atomic_write,
    checkpoint_candidates,
    find_resume_checkpoint,
    latest_checkpoint,
    load_state,
    not_loaded_message,
    read_checkpoint,
    upgrade_state,
)
from vispe.engine.config import ConfigError, differing_keys, flat_config
from vispe.engine.workdir import WorkDirError, WorkDirLock, check_work_dir, similar_dirs, takeover_message
from vispe.registry import MODELS, RUNNERS

#: config sections compared between a checkpoint's run and a resuming one
COMPARED = ('model', 'optim_wrapper', 'param_scheduler', 'train_dataloader', 'train_cfg')
_RANK_VARIABLES = {'pytorch': 'RANK', 'slurm': 'SLURM_PROCID', 'mpi': 'OMPI_COMM_WORLD_RANK'}


def _shown(flat: dict[str, Any], key: str) -> str:
    return repr(flat[key]) if key in flat else 'unset'


def config_differences(saved_text: str | None, cfg: Any, sections=COMPARED, first: int = 6) -> list[str]:
    """'model.backbone.encoding: 'rope_mixed' (checkpoint's run) -> 'rope_axial' (now)' for each setting of
    ``sections`` that differs between the config text a checkpoint's meta holds and ``cfg``; [] when the text is
    missing or does not parse."""
    if not saved_text or cfg is None:
        return []
    try:
        saved = Config.fromstring(saved_text, file_format='.py')
    except Exception:  # a config that only parses with its custom imports: nothing to compare
        return []
    old = {k: v for section in sections for k, v in flat_config(saved.get(section), section).items()}
    new = {k: v for section in sections for k, v in flat_config(cfg.get(section), section).items()}
    lines = [f"{k}: {_shown(old, k)} (checkpoint's run) -> {_shown(new, k)} (now)" for k in differing_keys(old, new)]
    return lines[:first] + ([f'... {len(lines) - first} more'] if len(lines) > first else [])


def _revised(state: dict[str, Any], revise_keys) -> dict[str, Any]:
    for pattern, replacement in revise_keys:
        state = {re.sub(pattern, replacement, k): v for k, v in state.items()}
    return state


def _meta_model(model: Any) -> nn.Module:
    """The model a config describes, built on the meta device (shapes, no memory, no random draws), or the module
    itself."""
    if isinstance(model, nn.Module):
        return model
    cfg = copy.deepcopy(dict(model))
    try:
        with torch.device('meta'):
            return MODELS.build(cfg)
    except Exception:  # code that needs real tensors at build time: build it for real without touching the seeds
        try:
            with torch.random.fork_rng(devices=[]):
                return MODELS.build(copy.deepcopy(dict(model)))
        except (ValueError, TypeError, KeyError) as err:
            raise model_config_error(err) from err


def model_config_error(err: Exception) -> ConfigError:
    """``ConfigError('model: ...')`` carrying the message of an error the model's build raised."""
    message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    return ConfigError(f'model: {message}')


def _is_main_process(launcher: str) -> bool:
    """Rank 0, read before the process group exists (the lock is taken before the Runner sets it up)."""
    variable = _RANK_VARIABLES.get(launcher)
    return variable is None or int(os.environ.get(variable, '0')) == 0


#: the first line of the config a training run writes into its work dir: what tells vispe's copy from a user's file
CONFIG_DUMP_MARK = (
    '# vispe: the config of the training run in this work dir (VispeRunner); a later run here replaces it'
)


def config_dump_conflict(work_dir: str, cfg: Any) -> str | None:
    """Why the training run must not write its config to ``<work_dir>/<config basename>`` (None when it may): a
    file of that name exists that no vispe run dumped (no ``CONFIG_DUMP_MARK``) and that is not this config's text
    (an older vispe's dump of it)."""
    filename = getattr(cfg, 'filename', None)
    if not filename:
        return None
    name = osp.basename(filename)
    path = osp.join(work_dir, name)
    if not osp.lexists(path):
        return None
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and (text.startswith(CONFIG_DUMP_MARK) or text == cfg.pretty_text):
        return None
    return (
        f'work dir {work_dir!r} holds {name}, which this training run would replace with its config (mmengine '
        f'names the copy after the config) and which no vispe run wrote; nothing was written: move {name} away, or '
        'train into another --work-dir'
    )


@RUNNERS.register_module()
class VispeRunner(Runner):
    """mmengine's ``Runner`` with strict loading, a locked and protected work dir, checked resumes and schedules
    that fit the run (module doc). Takes the Runner's arguments; reads ``load_strict`` (default True) and
    ``overwrite_work_dir`` (default False) from ``cfg``."""

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
        try:
            super().__init__(*bound.args[1:], **bound.kwargs)
        except BaseException:
            self.release_work_dir()
            raise
        for notice in self._notices:
            self.logger.warning(notice)

    # --- before anything is written ------------------------------------------------------------------------------
    def _plan_start(self, work_dir, resume, load_from, model, cfg, optim_wrapper, param_scheduler) -> tuple[bool, Any]:
        """(resume, load_from) for this training run, after the checks of the module doc; raises on a refusal."""
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
            if not _has_training_state(ckpt):
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
        self._check_resumable(path, ckpt, model, cfg, optim_wrapper, param_scheduler)
        self._preloaded[path] = ckpt
        return True, path

    def _check_resumable(self, path, ckpt, model, cfg, optim_wrapper, param_scheduler) -> None:
        """CheckpointError unless ``ckpt`` can be resumed with this config, naming what differs."""
        if not _has_training_state(ckpt):
            raise CheckpointError(
                f'cannot resume from {path!r}: it holds weights only (no optimizer, message hub or epoch counter: '
                'an exported or model-zoo checkpoint, or one saved with save_optimizer=False); to start a new run '
                f'from these weights, give it as load_from without --resume (--cfg-options load_from={path})'
            )
        meta = ckpt.get('meta') or {}
        saved_config = meta.get('cfg') or meta.get('config')  # mmengine saves the run's config text as 'cfg'
        problems = []
        built = _meta_model(model)
        state = _revised(ckpt['state_dict'], [(r'^module\.', '')]) if 'state_dict' in ckpt else {}
        try:
            state = upgrade_state(built, state)
        except ValueError as error:
            problems.append(str(error))
        mismatch = StateMismatch(built.state_dict(), state)
        if mismatch:
            problems.append(f'its weights do not fit the model this config builds: {mismatch.describe()}')
        elif optim_wrapper is not None and 'optimizer' in ckpt:
            problems += _optimizer_differences(built, optim_wrapper, ckpt['optimizer'])
        saved_schedulers = ckpt.get('param_schedulers')
        configured = param_scheduler if isinstance(param_scheduler, (list, tuple)) else None
        if isinstance(saved_schedulers, list) and configured is not None and len(saved_schedulers) != len(configured):
            problems.append(
                f'it was saved with {len(saved_schedulers)} parameter scheduler(s) and this config has '
                f'{len(configured)}, so some would restart from scratch'
            )
        differences = config_differences(saved_config, cfg)
        if problems:
            changed = (
                '; the config differs from the one that run was trained with in: ' + '; '.join(differences)
                if differences
                else ''
            )
            raise CheckpointError(
                f'cannot resume from {path!r} with this config: {"; ".join(problems)}{changed}. Nothing in the work '
                "dir was changed. Resume with the run's own config (mmengine saved it in the work dir), or start a "
                'new run in another --work-dir (with load_from set to this checkpoint and --non-strict to reuse the '
                'weights that fit)'
            )
        if differences:
            self._notices.append(
                f"resuming {path} with a config that differs from its run's in: " + '; '.join(differences)
            )

    def build_model(self, model: Any) -> nn.Module:
        """mmengine's ``build_model``, with a config the model refuses (vispe's messages: an image size that is not
        a size, two rotary encodings, an unknown argument) raised as a ``ConfigError`` the tools print as one line."""
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
        """mmengine's ``load_checkpoint``, strict unless the config says ``load_strict = False`` (resumes always
        strict): a mismatch is ``CheckpointError`` naming the keys; a non-strict load logs the keys it left."""
        strict = True if self._resuming else (self._load_strict if strict is None else strict)
        checkpoint = self._preloaded.pop(filename, None) or _load_checkpoint(filename, map_location=map_location)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        model = self.model.module if is_model_wrapper(self.model) else self.model
        state = checkpoint.get('state_dict', checkpoint)
        if not isinstance(state, dict):
            raise CheckpointError(f'{filename!r} has no model weights (expected a state dict of tensors)')
        state = _revised({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, revise_keys)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # the not-loaded keys go to the log instead
            mismatch = load_state(model, state, strict, filename)
        if mismatch:
            self.logger.warning(not_loaded_message(filename, mismatch))
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
        """Deferred: mmengine calls this at construction, before a resume is known to work; vispe writes the config
        once the checkpoint has loaded (``load_or_resume``)."""

    @master_only
    def _dump_config(self, training: bool) -> None:
        """The config, as this run uses it, in the work dir (training) or in the run's log folder (test and val
        runs, so that they never overwrite the config of the training run that made the checkpoints)."""
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
        """mmengine logs ~140 lines of environment and config while the Runner is built, before any data set is;
        a data set that cannot be built (a missing data_root, an empty class folder) then printed its one-line error
        after all of them. vispe logs them once the first loop has built its data (``_log_env_now``)."""
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
        if isinstance(self._train_loop, BaseLoop):
            scheduler = self._fit_schedules(scheduler)
        built = super().build_param_scheduler(scheduler)
        if isinstance(self._train_loop, BaseLoop):
            schedulers = built if isinstance(built, list) else [s for group in built.values() for s in group]
            for index, one in enumerate(schedulers):
                self._check_schedule_fits(index, one)
        return built

    def _fit_schedules(self, schedulers: Any) -> Any:
        """The scheduler configs of a run shorter than they were written for (``--cfg-options
        train_cfg.max_epochs=1``): a scheduler that would begin at or after the run's end is left out (a cosine after
        a warm-up that takes the whole run), and a warm-up (LinearLR rising, ConstantLR) that would end after it is
        clipped to the run: the same ramp, stopped where the run ends. Each change is logged in one line. Per
        optimizer for a dict of lists."""
        if isinstance(schedulers, dict) and 'type' not in schedulers:  # one list per optimizer
            return {name: self._fit_schedules(group) for name, group in schedulers.items()}
        if not isinstance(schedulers, (list, tuple)):
            return schedulers if schedulers is None else self._fit_schedules([schedulers])
        fitted = []
        for index, config in enumerate(schedulers):
            fitted += self._fit_schedule(index, config)
        return fitted

    def _fit_schedule(self, index: int, config: Any) -> list[Any]:
        if not isinstance(config, dict):
            return [config]
        by_epoch = config.get('by_epoch', True)
        length, unit = (self.max_epochs, 'epoch') if by_epoch else (self.max_iters, 'iteration')
        name = f'param_scheduler[{index}] ({config.get("type")})'
        begin, end = config.get('begin', 0), config.get('end', INF)
        if not length or begin < length and (end == INF or end <= length):
            return [config]
        if begin >= length:
            self.logger.warning(
                f'{name} begins at {unit} {begin}, where this {length}-{unit} run has ended: left out (the run ends '
                'before it starts)'
            )
            return []
        epoch_length = max(1, self.max_iters // max(1, self.max_epochs)) if self.max_epochs else 1
        steps = epoch_length if by_epoch and config.get('convert_to_iter_based') else 1  # steps of the ramp a unit
        clipped = _clipped_warmup(config, length, steps)
        if clipped is None:
            return [config]  # a decay set for a longer run: refused by _check_schedule_fits, naming the fix
        self.logger.warning(
            f'{name} is a warm-up to {unit} {end}, longer than this {length}-{unit} run: clipped to the run (the same '
            f'ramp, stopped at {unit} {length}: the learning rate reaches {clipped.get("end_factor", 1.0):.3g} of '
            'the base rate, not the base rate)'
        )
        return [clipped]

    def _check_schedule_fits(self, index: int, scheduler) -> None:
        """ConfigError when ``scheduler`` ends after the run's last epoch or iteration."""
        end = getattr(scheduler, 'end', INF)
        if end == INF:
            return
        epoch_length = max(1, self.max_iters // max(1, self.max_epochs)) if self.max_epochs else 1
        length, unit = (self.max_epochs, 'epoch') if scheduler.by_epoch else (self.max_iters, 'iteration')
        if end <= length:
            return
        as_epochs = '' if scheduler.by_epoch or self.max_epochs <= 1 else f' (epoch {end / epoch_length:g})'
        raise ConfigError(
            f'param_scheduler[{index}] ({type(scheduler).__name__}) ends at {unit} {end}{as_epochs}, after the '
            f"run's last {unit} ({length}): it was set for a longer run and would be cut off (a decay that never "
            'reaches its floor, a warm-up that never reaches the base rate). Drop its end, so that it follows the '
            f"run's length, or set it to at most the run's length (param_scheduler.{index}.end)"
        )

    def train(self) -> nn.Module:
        try:
            return super().train()
        finally:
            self.release_work_dir()

    def release_work_dir(self) -> None:
        """Free the work dir's lock (``train()`` does when it ends, however it ends)."""
        if self._lock is not None:
            self._lock.release()


def _clipped_warmup(config: dict, length: int, steps: int) -> dict | None:
    """A warm-up scheduler config ending at ``length`` instead of its later ``end``, on the same ramp: LinearLR
    rising from ``start_factor`` to ``end_factor`` over its ``steps``-per-unit steps (mmengine reaches the end factor
    at the last step before ``end``; the clipped one ends at the factor the ramp has at the run's last step), or
    ConstantLR (its factor until the end). None for anything else."""
    begin, end = config.get('begin', 0), config['end']
    kind = config.get('type')
    if kind == 'ConstantLR':
        return dict(config, end=length)
    start, stop = config.get('start_factor', 1.0 / 3), config.get('end_factor', 1.0)
    if kind != 'LinearLR' or start >= stop:
        return None
    reached = start + (stop - start) * ((length - begin) * steps - 1) / ((end - begin) * steps - 1)
    return dict(config, end=length, end_factor=reached)


def _has_training_state(ckpt: dict) -> bool:
    meta = ckpt.get('meta') or {}
    return 'message_hub' in ckpt and 'epoch' in meta and 'iter' in meta and 'state_dict' in ckpt


def _optimizer_differences(model: nn.Module, optim_wrapper: Any, saved: dict) -> list[str]:
    """How the optimizer this config builds for ``model`` differs from a checkpoint's, in parameter groups (what
    makes ``load_state_dict`` fail with 'different number of parameter groups'); [] when they match or the config's
    optimizer cannot be built here."""
    if not isinstance(optim_wrapper, dict) or not isinstance(saved, dict) or 'param_groups' not in saved:
        return []
    try:
        wrapper = build_optim_wrapper(model, copy.deepcopy(optim_wrapper))
    except Exception:  # e.g. AmpOptimWrapper without a GPU: mmengine's own resume will judge
        return []
    groups = wrapper.optimizer.param_groups
    saved_groups = saved['param_groups']
    if len(groups) != len(saved_groups):
        return [
            f"its optimizer has {len(saved_groups)} parameter groups and this config's has {len(groups)} "
            '(the model, optim_wrapper.constructor or its paramwise_cfg changed)'
        ]
    sizes = [len(g['params']) for g in groups]
    saved_sizes = [len(g['params']) for g in saved_groups]
    if sizes != saved_sizes:
        return ["its optimizer's parameter groups hold other numbers of parameters than this config's"]
    return []


def build_runner(cfg) -> Runner:
    """The Runner a config asks for (``runner_type``, mmengine's convention), else ``VispeRunner``."""
    if cfg.get('runner_type'):
        return RUNNERS.build(cfg)
    return VispeRunner.from_cfg(cfg)


def interrupted_message(config: str, cfg: Any, args: Any, command: str = 'vispe train') -> str:
    """The one line training ends with on Ctrl-C: where the last complete checkpoint is and how to go on, as the
    ``command`` the user ran ('vispe train', 'python tools/train.py')."""
    work_dir = cfg.work_dir if cfg is not None else None
    last = latest_checkpoint(work_dir) if work_dir and osp.isdir(work_dir) else None
    again = f'{command} {config} --work-dir {work_dir} --resume'
    extra = ' '.join(f'{k}={v}' for k, v in (getattr(args, 'cfg_options', None) or {}).items())
    again += f' --cfg-options {extra}' if extra else ''
    if last:
        return f'interrupted: the last complete checkpoint is {last}; continue with: {again}'
    return f'interrupted before the first checkpoint was saved; nothing to resume in {work_dir} yet'


__all__ = [
    'CONFIG_DUMP_MARK',
    'VispeRunner',
    'build_runner',
    'config_dump_conflict',
    'config_differences',
    'interrupted_message',
]
