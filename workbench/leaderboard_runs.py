"""The encoding leaderboard: every encoding x task x seed trained with one schedule, evaluated at several
resolutions with every strategy; reported per (task, encoding) with its best strategy and with the plain one,
as mean and spread over seeds."""

from __future__ import annotations

import functools
import glob
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vispe.encodings.build import split_variant
from vispe.evaluation.outputs import write_json
from vispe.evaluation.trained_model import resolution_label
from vispe.experiments.compare import (
    SHAPES2D_TASK_CONFIGS,
    Run,
    covers,
    encoding_option,
    final_checkpoint,
    last_checkpoint,
    shown,
    supported_strategies,
    train_and_evaluate,
)
from workbench.leaderboard_report import Key, task_label

#: the tasks a leaderboard trains unless told; LOOPE's Three-Cell benchmark (``three_cell_loope``) is a board of its
#: own, asked for by name: its question is about its 14 x 14 grid, so it is asked at the training size only
DEFAULT_TASKS = ('position', 'relation')
#: test sizes of the leaderboard's tasks: 1x, then 0.5x-3x and 2:1 / 1:2 at the 64 tokens of 32 px
DEFAULT_RESOLUTIONS = ('32', '16', '24', '48', '64', '96', '44x24', '24x44')
#: tasks with test sizes of their own (and only the fixed training regime)
TASK_RESOLUTIONS = {'three_cell_loope': ('56',)}


def task_resolutions(task: str) -> list[str]:
    """The test sizes a board evaluates ``task`` at when none are asked for (the first: its training size)."""
    return list(TASK_RESOLUTIONS.get(task, DEFAULT_RESOLUTIONS))


#: per training regime of the leaderboard, one shipped config per shapes2d task: ``fixed`` (32 px, as above),
#: ``sizes`` (FlexiViT: one square side of 16-64 px per batch) and ``aspect`` (NaFlex: each image its own aspect
#: ratio in [1/3, 3] within the fixed size's 64 tokens, batches of mixed sizes padded)
REGIME_CONFIGS = {
    'fixed': SHAPES2D_TASK_CONFIGS,
    'sizes': {
        'position': 'vit/vit_tiny_shapes2d_mixedres_position.py',
        'relation': 'vit/vit_tiny_shapes2d_mixedres_relation.py',
    },
    'aspect': {
        'position': 'vit/vit_tiny_shapes2d_mixedres_aspect_position.py',
        'relation': 'vit/vit_tiny_shapes2d_mixedres_aspect_relation.py',
    },
}


def entry_options(entry: str) -> list[str]:
    """A leaderboard entry's cfg-options: an encoding spec's (``encoding_option``), or a named variant's
    (``vispe.encodings.build.VARIANTS``): its spec's and its backbone arguments."""
    spec, kwargs = split_variant(entry)
    return [encoding_option(spec), *(f'model.backbone.{key}={value!r}' for key, value in kwargs.items())]


def leaderboard_runs(
    task_configs: dict[str, str],
    encodings: Sequence[str],
    seeds: Sequence[int],
    out: str,
    regimes: dict[str, dict[str, str]] | None = None,
) -> list[Run]:
    """One run per (task, encoding, seed), in ``out/<task>/<encoding>/seed<k>``; with ``regimes`` (regime -> task ->
    config, ``REGIME_CONFIGS``), one per regime too: the ``fixed`` regime there, any other in
    ``out/<regime>/<task>/...`` and labelled ``task_label(task, regime)``, its task's table of its own."""
    plan = regimes or {'fixed': task_configs}
    return [
        Run(
            task_label(task, regime),
            configs[task],
            os.path.join(out, *([] if regime == 'fixed' else [regime]), task, run_folder(enc), f'seed{seed}'),
            [*entry_options(enc), f'randomness.seed={seed}'],
            encoding=enc,
            seed=seed,
            regime=regime,
        )
        for regime, configs in plan.items()
        for task in task_configs
        for enc in encodings
        for seed in seeds
    ]


def run_folder(encoding: str) -> str:
    """The folder name of an encoding's runs: the name itself, a one-line spec's ':' as '@'
    ('rope_dinov3:rescale=none' -> 'rope_dinov3@rescale=none'), which every file system takes (the archive is
    committed)."""
    return encoding.replace(':', '@')


@dataclass(frozen=True)
class Archive:
    """Where the leaderboard keeps each run's results.json beyond its work folder (checkpoints are too large to
    keep): ``root/<the run's folder relative to out>/results.json``, with ``run.json`` beside it (config, options,
    wall and CPU seconds of training and evaluation, torch threads, the checkpoint an interrupted run resumed from,
    the commit of the code that trained it (``_loaded_commit``), the mean training loss of each epoch
    (``epoch_losses``), machine). A run that has no final checkpoint in ``out`` but an archived result covering the
    asked resolutions and strategies is not trained again: its archived result is used as it is (delete the file to
    retrain), unless its record names other options (another ``--epochs``): that run is trained anew. The
    checkout's archive (``results/leaderboard``) holds the runs behind the docs' tables, so they can be rebuilt, and
    continued, on another machine."""

    root: str
    out: str

    def folder(self, run: Run) -> str:
        return os.path.join(self.root, os.path.relpath(run.work_dir, self.out))

    def load(self, run: Run, resolutions: Sequence[str]) -> dict | None:
        path = os.path.join(self.folder(run), 'results.json')
        if not os.path.isfile(path) or final_checkpoint(run) is not None:  # a local checkpoint: its own results
            return None
        with open(path) as f:
            results = json.load(f)
        return results if self.same_run(run) and self.covers(run, results, resolutions) else None

    def same_run(self, run: Run) -> bool:
        """Whether the archived run was trained as ``run`` is asked for: the config and options its ``run.json``
        records (another ``--epochs``, another spec) are the run's; an archive without the record is taken as it is."""
        path = os.path.join(self.folder(run), 'run.json')
        if not os.path.isfile(path):
            return True
        with open(path) as f:
            record = json.load(f)
        return record.get('config', run.config) == run.config and record.get('cfg_options') in (None, run.cfg_options)

    def covers(self, run: Run, results: dict, resolutions: Sequence[str]) -> bool:
        """Whether an archived result answers ``run`` at ``resolutions``: complete, with exactly those resolutions
        and the strategies the run's model has."""
        return covers(results, resolutions, supported_strategies(run))

    def store(self, run: Run, results: dict, timing: dict | None = None) -> None:
        """Write the run's results, and its record (``run.json``) with ``timing`` (``_timed``'s; None: the run was
        only read here, so an existing record of its training is kept)."""
        folder = self.folder(run)
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, 'results.json'), results, None)  # the archive's own copy: format check only
        meta_path = os.path.join(folder, 'run.json')
        if timing is None and os.path.isfile(meta_path):  # reused here: keep the record of its training
            return
        meta = dict(
            config=run.config,
            cfg_options=run.cfg_options,
            task=run.task,
            encoding=run.encoding,
            seed=run.seed,
            regime=run.regime,
            **(
                {k: round(v, 1) if isinstance(v, float) else v for k, v in timing.items()}
                if timing
                else dict(train_and_eval_seconds=None, cpu_seconds=None)
            ),
        )
        if 'commit' not in meta:  # a trained run's is that of the code it ran (``_timed``)
            meta['commit'] = _commit()
        meta['machine'] = _machine()
        write_json(meta_path, meta, None)


def _machine() -> str:
    """What trained the run: the processor architecture and CPU count, and the GPU where one was used."""
    import torch

    text = f'{platform.machine()}, {os.cpu_count()} CPUs'
    return text + f', {torch.cuda.get_device_name()}' if torch.cuda.is_available() else text


def _git(*args: str) -> str | None:
    """``git args`` in this checkout: its stripped output, None outside a git checkout or when git fails."""
    try:
        out = subprocess.run(
            ['git', *args], capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    return _git('rev-parse', '--short', 'HEAD') or None


@functools.cache
def _loaded_commit() -> str | None:
    """The commit of the code this process runs, read when it first trains a run and kept: a ``--jobs`` worker
    imports vispe for its first run and keeps that code for its later ones, whatever the checkout does meanwhile.
    '+changes' when vispe/ or configs/ then differed from that commit."""
    commit = _commit()
    if commit and _git('status', '--porcelain', '--untracked-files=no', '--', ':(top)vispe', ':(top)configs'):
        commit += '+changes'
    return commit


def collect(
    runs: Sequence[Run],
    resolutions: Sequence[str],
    log: Callable[[str], None] = print,
    archive: Archive | None = None,
    jobs: int = 1,
    work: Callable[..., dict] | None = None,
    train: bool = True,
) -> dict[Key, list[float]]:
    """Train / reuse and evaluate every run (``work``, default ``train_and_evaluate``; or read its ``archive``d
    result); values per (task, the run's encoding label, strategy, resolution).

    ``jobs`` > 1 trains that many runs at once, each in a process of its own (spawned) with cpu_count / jobs
    threads; on a GPU they share it. Each finished run is archived as it finishes; a run that fails does not stop
    the others, and the failures are raised together at the end. ``train=False`` reads what the archive (or a
    finished work folder) holds and leaves the other runs out, logging each as missing: tables of a board that is
    still being built."""
    work = train_and_evaluate if work is None else work  # looked up here: a test may replace the module's
    done: dict[int, dict] = {}
    pending = []
    for i, run in enumerate(runs):
        if archive is not None and (results := archive.load(run, resolutions)) is not None:
            log(f'archived: {shown(archive.folder(run))}/results.json')
            done[i] = results
        elif not train and final_checkpoint(run) is None:
            log(f'missing (not trained, --no-train): {shown(run.work_dir)}')
        else:
            pending.append(i)

    def finish(i: int, results: dict, timing: dict | None) -> None:
        if archive is not None:
            archive.store(runs[i], results, timing)
        done[i] = results

    if jobs <= 1 or len(pending) <= 1:
        for i in pending:
            finish(i, *_timed(work, runs[i], resolutions, log))
    else:
        failed = _run_parallel(work, runs, pending, resolutions, jobs, finish, log)
        if failed:
            raise RuntimeError(
                f'{len(failed)} of {len(pending)} leaderboard runs failed (the others are finished and kept):\n'
                + '\n'.join(f'  {runs[i].work_dir}: {type(e).__name__}: {e}' for i, e in failed)
            )
    values: dict[Key, list[float]] = {}
    for i, run in enumerate(runs):
        for row in done[i]['results'] if i in done else []:
            # the run's own label, which names an option variant ('rope_dinov3:rescale=none') where the results
            # name only the encoding
            key = (run.task, run.encoding, row['strategy'], resolution_label(row['resolution']))
            values.setdefault(key, []).append(row['value'])
    return values


def _timed(
    work: Callable[..., dict], run: Run, resolutions: Sequence[str], log: Callable[[str], None] = print
) -> tuple[dict, dict | None]:
    """``work(run, resolutions, log)`` and the record of its training (None when the run was trained before: only
    read): wall and CPU seconds, the torch threads it ran on and, for a run resumed from an interrupted one, the
    checkpoint it resumed from (its times then cover the rest of the run only). Wall time counts whatever else the
    machine did meanwhile (other jobs, a paused process); CPU time is the work itself: this process's, and its
    data-loader workers' once they have exited. The thread count is recorded because it changes the order of
    floating-point sums, so one seed's run is reproducible to the digit only at the same count; the commit is that
    of the code this process loaded (``_loaded_commit``), not the checkout's when the run ends."""
    import torch

    if final_checkpoint(run) is not None:
        return work(run, resolutions, log), None
    resumed_from = last_checkpoint(run)  # an interrupted run's: training resumes from it
    commit = _loaded_commit()
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    results = work(run, resolutions, log)
    timing = dict(
        train_and_eval_seconds=time.perf_counter() - start,
        cpu_seconds=_cpu_seconds() - cpu_start,
        threads=torch.get_num_threads(),
        resumed_from=None if resumed_from is None else os.path.basename(resumed_from),
        commit=commit,
        train_loss=epoch_losses(run.work_dir),
    )
    return results, timing


def epoch_losses(work_dir: str) -> dict[str, float]:
    """The mean logged training loss of each epoch of the run in ``work_dir`` (keys: epoch numbers as text, as in
    JSON), from mmengine's ``<timestamp>/vis_data/scalars.json`` of each session of the run, oldest first: a
    resumed session's epochs replace those the interrupted one had logged. Whether and when a run left a plateau
    (``relation``'s loss sits at ln 4 until the model uses positions) can so be read from the archive."""
    by_epoch: dict[int, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(work_dir), '*', 'vis_data', 'scalars.json'))):
        session: dict[int, list[float]] = {}
        with open(path) as f:
            for line in f:
                row = json.loads(line) if line.strip() else {}
                if 'loss' in row and 'epoch' in row:
                    session.setdefault(int(row['epoch']), []).append(float(row['loss']))
        by_epoch.update(session)
    return {str(epoch): round(statistics.fmean(by_epoch[epoch]), 4) for epoch in sorted(by_epoch)}


def training_losses(runs: Sequence[Run], archive: Archive | None = None) -> dict[str, list[dict[str, float] | None]]:
    """Per encoding, each run's epoch losses (``epoch_losses``), in the order of ``runs``: from the archived
    run.json when there is one, else from the run's work folder; None for a run that has results but no record of
    its losses (archived before losses were kept). Runs with neither results nor losses are left out."""
    out: dict[str, list[dict[str, float] | None]] = {}
    for run in runs:
        meta = os.path.join(archive.folder(run), 'run.json') if archive is not None else ''
        if meta and os.path.isfile(meta):
            with open(meta) as f:
                out.setdefault(run.encoding, []).append(json.load(f).get('train_loss'))
        elif final_checkpoint(run) is not None:
            out.setdefault(run.encoding, []).append(epoch_losses(run.work_dir) or None)
    return out


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have exited."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _set_threads(threads: int) -> None:
    """A parallel leaderboard job's share of the CPU (a spawned process's initializer)."""
    import torch

    torch.set_num_threads(threads)


def _run_parallel(
    work: Callable[..., dict],
    runs: Sequence[Run],
    pending: Sequence[int],
    resolutions: Sequence[str],
    jobs: int,
    finish: Callable[[int, dict, dict | None], None],
    log: Callable[[str], None],
) -> list[tuple[int, BaseException]]:
    """``pending`` runs, ``jobs`` at a time in spawned processes; ``finish`` each as it ends. Returns the failures."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // jobs)
    log(f'{len(pending)} runs, {jobs} at a time, {threads} thread(s) each')
    failed: list[tuple[int, BaseException]] = []
    context = multiprocessing.get_context('spawn')  # a fresh interpreter per job: no forked torch or mmengine state
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_set_threads, initargs=(threads,)) as pool:
        futures = {pool.submit(_timed, work, runs[i], resolutions): i for i in pending}
        for future in as_completed(futures):
            i = futures[future]
            try:
                results, timing = future.result()
            except Exception as error:  # noqa: BLE001 - reported with the others at the end
                log(f'failed: {shown(runs[i].work_dir)}: {type(error).__name__}: {error}')
                failed.append((i, error))
                continue
            finish(i, results, timing)
            seconds = None if timing is None else timing['train_and_eval_seconds']
            log(f'finished: {shown(runs[i].work_dir)}' + ('' if seconds is None else f' ({seconds:.0f} s)'))
    return failed
