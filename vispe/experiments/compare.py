"""Train-and-sweep comparisons of encodings: each run trains in process (``vispe.engine.train``), is evaluated at
several resolutions (``vispe.sweeps.resolution``) and lands in one summary (JSON, PNG per task, a table). Configs are
files or shipped configs' names, so a comparison runs from an installed vispe. Finished runs (last checkpoint at the
config's final epoch) are reused and unfinished ones resume, so a comparison can be interrupted and started again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vispe.encodings.build import parse_encoding_spec
from vispe.engine.checkpoint import pointed_checkpoint
from vispe.engine.config import load_config, parse_option_value
from vispe.engine.train import train as train_in_process
from vispe.evaluation import figures, outputs, report
from vispe.evaluation.report import write_json
from vispe.evaluation.trained_model import parse_resolution, resolution_label
from vispe.experiments.progress import RunsProgress
from vispe.sweeps.engine import SweepConflict, failure_message, replace_args
from vispe.sweeps.resolution import evaluate_resolution, plot_results, resolution_column

#: one shipped config per shapes2d task; the encoding is chosen per run with --cfg-options
SHAPES2D_TASK_CONFIGS = {
    'position': 'vit/vit_tiny_shapes2d_position.py',
    'relation': 'vit/vit_tiny_shapes2d_relation.py',
    'three_cell_loope': 'vit/vit_tiny_shapes2d_three_cell_loope.py',
}

#: a sweep as compare runs one: ``sweep(cfg, checkpoint, *settings, out_dir=, force=, log=)`` (vispe.sweeps.registry)
Sweep = Callable[..., dict[str, Any]]


@dataclass
class Run:
    """One training run: ``config`` (a file or a shipped config's name) with ``cfg_options``, in ``work_dir``;
    ``encoding``, ``seed`` and the training ``regime`` label it."""

    task: str
    config: str
    work_dir: str
    cfg_options: list[str] = field(default_factory=list)
    encoding: str = ''
    seed: int | None = None
    regime: str = 'fixed'
    strategies: list[str] | None = None  # the resolution strategies to evaluate; None: every one the model takes


def encoding_option(encoding: str) -> str:
    """'rope_mixed+peg' -> the cfg-option selecting that encoding list; a spec with several options
    ('loope:order=raster,context=false') becomes a Python literal, which ``--cfg-options`` reads whole, unsplit."""
    if ',' in encoding:
        return f'model.backbone.encoding={parse_encoding_spec(encoding)!r}'
    names = encoding.split('+')
    value = names[0] if len(names) == 1 else '[' + ','.join(names) + ']'
    return f'model.backbone.encoding={value}'


def schedule_options(epochs: int | None) -> list[str]:
    """Override the epochs of the adamw_short schedule (warm-up 1 epoch, then a cosine following the run's length)."""
    if epochs is None:
        return []
    if epochs < 2:
        raise ValueError(f'--epochs {epochs}: the schedule has a one-epoch warm-up, so it needs at least 2 epochs')
    return [f'train_cfg.max_epochs={epochs}', f'train_cfg.val_interval={epochs}']


def run_options(run: Run) -> dict[str, Any]:
    """The run's cfg-options, parsed as ``vispe train --cfg-options`` parses them."""
    options = dict(o.split('=', 1) for o in run.cfg_options)
    return {k: parse_option_value(v) for k, v in options.items()}


def run_config(run: Run):
    """The run's config with its cfg-options applied."""
    return load_config(run.config, run_options(run))


def shown(path: str) -> str:
    """``path`` as a log line shows it: relative to the working directory when inside it."""
    rel = os.path.relpath(os.path.abspath(path))
    return path if rel.startswith('..') else rel


def last_checkpoint(run: Run) -> str | None:
    """The checkpoint mmengine saved last in the run's work folder (its ``last_checkpoint`` pointer, when it names a
    file in that folder: ``pointed_checkpoint``), or None."""
    return pointed_checkpoint(run.work_dir)[0]


def final_checkpoint(run: Run) -> str | None:
    """The final checkpoint (last epoch or iteration) of a finished run, or None."""
    ckpt = last_checkpoint(run)
    if ckpt is None:
        return None
    return ckpt if os.path.basename(ckpt) == final_checkpoint_name(run_config(run)) and os.path.isfile(ckpt) else None


def final_checkpoint_name(cfg) -> str:
    """'epoch_<max_epochs>.pth', or 'iter_<max_iters>.pth' for iteration-based training (mmengine's names)."""
    train_cfg = cfg.train_cfg
    if train_cfg.get('max_iters') is not None:
        return f'iter_{train_cfg.max_iters}.pth'
    return f'epoch_{train_cfg.max_epochs}.pth'


def train(run: Run, log: Callable[[str], None] = print, hooks: Sequence[Any] = ()) -> str:
    """Train one run in process, reusing a finished run and resuming an interrupted one; returns its last checkpoint.
    ``hooks``: mmengine Hook instances added to the run's."""
    ckpt = final_checkpoint(run)
    if ckpt:
        log(f'reusing {shown(ckpt)}')
        return ckpt
    resume = os.path.isfile(os.path.join(run.work_dir, 'last_checkpoint'))
    options = ['--cfg-options', *run.cfg_options] if run.cfg_options else []
    log(
        ' '.join(['$ vispe train', run.config, '--work-dir', run.work_dir, *(['--resume'] if resume else []), *options])
    )
    train_in_process(run.config, run.work_dir, run_options(run), resume=resume, hooks=hooks)
    ckpt = final_checkpoint(run)
    if ckpt is None:
        raise RuntimeError(f'training {run.config} into {run.work_dir} ended without its final checkpoint')
    return ckpt


def evaluate(run: Run, ckpt: str, sweep: Sweep, out: str, *settings: Any, log: Callable[[str], None] = print) -> dict:
    """``sweep`` the run's checkpoint into ``out`` (replacing an older training's results there); returns the
    results, or raises when cells failed (out of memory even at batch size 1)."""
    log(f'{sweep.__name__} {shown(ckpt)} -> {shown(out)}')
    force = bool(replace_args(out, ckpt))
    try:
        results = sweep(run_config(run), ckpt, *settings, out_dir=out, force=force, log=log)
    except SweepConflict as err:  # the run's own folder, of another config, data or version: computed again
        log(f'recomputing {shown(out)}: {err}')
        results = sweep(run_config(run), ckpt, *settings, out_dir=out, force=True, log=log)
    if results['failed']:
        raise RuntimeError(failure_message(results, out))
    return results


def train_and_evaluate(
    run: Run, resolutions: Sequence[str], log: Callable[[str], None] = print, progress: RunsProgress | None = None
) -> dict:
    """Train (or reuse / resume) one run, evaluate it at ``resolutions``; returns its results.json content."""
    ckpt = train(run, log, [progress.hook()] if progress else [])
    if progress:
        progress.evaluating(f'evaluating at {", ".join(resolutions)} px')
    eval_dir = os.path.join(run.work_dir, 'eval')
    # the sweep engine reuses each finished cell whose checkpoint, config, data and versions are unchanged
    sizes = [parse_resolution(r) for r in resolutions]
    evaluate(run, ckpt, evaluate_resolution, eval_dir, sizes, run.strategies, log=log)
    with open(os.path.join(eval_dir, 'results.json')) as f:
        return json.load(f)


def train_and_sweep(run: Run, sweep: Sweep, log: Callable[[str], None] = print) -> dict:
    """Train (or reuse / resume) one run, then evaluate it with ``sweep`` at its config's default settings into
    ``work_dir/eval`` (reused when newer than the checkpoint); returns its results.json."""
    ckpt = train(run, log)
    out = os.path.join(run.work_dir, 'eval')
    evaluate(run, ckpt, sweep, out, log=log)  # finished cells are reused where nothing they depend on changed
    with open(os.path.join(out, 'results.json')) as f:
        return json.load(f)


def sweep_runs(
    task: str, configs: dict[str, str], labels: Sequence[str], out_dir: str, sweep: Sweep, log: Callable[[str], None]
) -> list[dict]:
    """``train_and_sweep`` each labelled config into ``out_dir/<label>``; the rows of all, each with
    ``encoding`` = its run's label (rope3d_mixed is rope3d to the model, gta+plucker two encodings)."""
    rows: list[dict] = []
    for label in labels:
        results = train_and_sweep(Run(task, configs[label], os.path.join(out_dir, label)), sweep, log)
        rows += [dict(r, encoding=label) for r in results['results']]
    return rows


def check_summary(out_dir: str, figure: str = 'summary.png') -> None:
    """OutputConflict unless a summary may write summary.md, summary.json and ``figure`` into ``out_dir``
    (``write_summary``'s three by default; a demo checks first, before it trains anything)."""
    for name, kind in (('summary.md', 'summary'), ('summary.json', 'summary'), (figure, 'figure')):
        outputs.check_target(os.path.join(out_dir, name), kind)


def write_summary(out_dir: str, text: str, rows: Sequence[dict], plot: Callable[[Sequence[dict], str], str]) -> str:
    """``out_dir/summary.md`` (``text``), ``summary.json`` (the rows) and ``summary.png`` (``plot(rows, path)``);
    returns the plot's path."""
    check_summary(out_dir)
    outputs.write_text(os.path.join(out_dir, 'summary.md'), text, 'summary')
    outputs.write_json(os.path.join(out_dir, 'summary.json'), {'results': list(rows)}, 'summary')
    return plot(rows, os.path.join(out_dir, 'summary.png'))


def covers(results: dict, resolutions: Sequence[str], strategies: Sequence[str] | None = None) -> bool:
    """Whether an eval_resolution results.json is complete and holds exactly ``resolutions`` and, when given,
    ``strategies`` (an interrupted sweep, or one with failed cells, does not)."""
    if not results.get('complete', True):
        return False
    done = {resolution_label(r['resolution']) for r in results['results']}  # JSON reads (48, 64) back as a list
    same = done == {resolution_label(parse_resolution(r)) for r in resolutions}
    if strategies is not None:
        same = same and {r['strategy'] for r in results['results']} == set(strategies)
    return same


def supported_strategies(run: Run) -> list[str]:
    """The resolution strategies eval_resolution will sweep for this run's model (built, not trained)."""
    from mmengine.registry import init_default_scope

    from vispe.engine.run_meta import align_training_grid
    from vispe.evaluation.trained_model import available_strategies
    from vispe.registry import MODELS

    init_default_scope('vispe')
    cfg = run_config(run)
    model = MODELS.build(cfg.model)
    align_training_grid(model, cfg, None)  # a run on several sizes: no strategy that scales from one size
    return available_strategies(model)


def compare(
    runs: Sequence[Run],
    resolutions: Sequence[str],
    out_dir: str,
    log: Callable[[str], None] = print,
    progress: RunsProgress | None = None,
) -> dict:
    """Run every comparison run; write ``out_dir/summary.json`` and ``out_dir/summary_<task>.png``. With
    ``progress``, each run's output goes to ``<work_dir>/console.log`` and the terminal shows only its line."""
    tasks: dict[str, dict] = {}
    for k, run in enumerate(runs):
        quiet = progress.run(k, os.path.join(run.work_dir, 'console.log')) if progress else contextlib.nullcontext()
        with quiet:
            result = train_and_evaluate(run, resolutions, log, progress)
        entry = tasks.setdefault(
            run.task,
            {
                'train_resolution': result['train_resolution'],
                'results': [],
                'title': report.describe(model_only(result)),
            },
        )
        entry['chance'] = figures.chance_level(result)
        entry['results'] += [dict(row, task=run.task) for row in result['results']]
    summary = {'metric': 'accuracy', 'resolutions': list(resolutions), 'tasks': tasks, 'runs': [vars(r) for r in runs]}
    summary['json'] = write_json(summary, os.path.join(out_dir, 'summary.json'))
    summary['plots'] = [
        plot_results(
            t['results'],
            os.path.join(out_dir, f'summary_{task}.png'),
            train_resolution=t['train_resolution'],
            title=f'{task}: {t["title"]}',
            chance=t['chance'],
        )
        for task, t in tasks.items()
    ]
    return summary


def model_only(results: dict) -> dict:
    """``results`` without its encoding, so that ``report.describe`` names what the compared runs share."""
    configs = {k: results.get(k) or {} for k in ('trained_config', 'resolved_config')}
    trimmed = {
        k: {key: v for key, v in c.items() if not key.startswith('model.backbone.encoding')} for k, c in configs.items()
    }
    return {**results, **trimmed}


def markdown_table(rows: Sequence[dict], resolutions: Sequence[str], fmt: str = '.1f') -> str:
    """A markdown table, one line per (encoding, strategy), one column per resolution, values formatted with fmt."""
    table = report.pivot(rows, ('encoding', 'strategy'), lambda row: resolution_column(dict(row)), columns=resolutions)
    return report.markdown(table, fmt)
