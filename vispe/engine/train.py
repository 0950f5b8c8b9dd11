"""Training in process, what ``vispe train`` runs, callable from the library; each run's mmengine instances are dropped
when it ends, so one process can train many runs."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from typing import Any

from mmengine.config import Config
from mmengine.hooks import Hook

from vispe.engine.checkpoint import allow_mmengine_checkpoints
from vispe.engine.config import compile_backbone, enable_amp, load_config, setup_distributed_backend
from vispe.engine.distributed import setup_cpu_distributed, teardown_distributed
from vispe.engine.runner import build_runner


def training_config(
    config: str,
    work_dir: str | None = None,
    cfg_options: Mapping[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    amp: bool = False,
    launcher: str = 'none',
) -> Config:
    """The config of a training run, as tools/train.py's flags set it (``cfg_options`` parsed already)."""
    cfg = load_config(config, dict(cfg_options) if cfg_options else None, work_dir)
    cfg.launcher = launcher
    # VispeRunner picks the work dir's newest complete checkpoint, before the config's load_from (pretrained
    # weights an interrupted fine-tune started from), and checks it against the config before writing anything
    cfg.resume = resume
    if overwrite:
        cfg.overwrite_work_dir = True
    if amp:
        enable_amp(cfg)
    return cfg


def run_training(cfg: Config, compile: bool = False, hooks: Sequence[Hook] = ()) -> None:
    """Build the Runner of ``cfg``, register ``hooks`` (instances, beside the config's) and train, then leave the
    process (process group, mmengine instances) as it was."""
    setup_distributed_backend(cfg)
    setup_cpu_distributed(cfg)
    allow_mmengine_checkpoints()
    runner = build_runner(cfg)
    try:
        for hook in hooks:
            runner.register_hook(hook)
        if compile:
            compile_backbone(runner.model)
        runner.train()
    finally:
        name = runner.experiment_name
        del runner  # teardown must be able to free the DDP wrapper
        release_instances(name)
    teardown_distributed()


def release_instances(experiment_name: str) -> None:
    """Drop the mmengine instances a Runner created under ``experiment_name`` and close the logger's files."""
    from mmengine.utils import ManagerMixin

    classes, seen = [ManagerMixin], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes += cls.__subclasses__()
        instance = cls._instance_dict.pop(experiment_name, None)
        if instance is None:
            continue
        for handler in list(getattr(instance, 'handlers', [])):  # MMLogger
            handler.close()
            instance.removeHandler(handler)
        if callable(getattr(instance, 'close', None)):  # Visualizer: its backends' files
            instance.close()
    gc.collect()


def train(
    config: str,
    work_dir: str | None = None,
    cfg_options: Mapping[str, Any] | None = None,
    compile: bool = False,
    hooks: Sequence[Hook] = (),
    **flags: Any,
) -> Config:
    """Train ``config`` (a file or a shipped name) into ``work_dir`` as ``vispe train`` does; returns the run's config.

    ``flags`` are ``training_config``'s; ``compile`` torch.compiles the backbone; ``hooks`` are added to the Runner's.
    """
    cfg = training_config(config, work_dir, cfg_options, **flags)
    run_training(cfg, compile, hooks)
    return cfg


__all__ = ['release_instances', 'run_training', 'train', 'training_config']
