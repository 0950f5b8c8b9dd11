"""Train-and-sweep comparisons of encodings: each run trains with tools/train.py, is evaluated at several
resolutions with tools/eval_resolution.py, and lands in one summary (JSON, PNG per task, a table).

Finished runs are reused (a run is finished when its last checkpoint is the config's final epoch) and
unfinished ones resume, so a comparison can be interrupted and started again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vispe.engine.config import load_config, parse_option_value
from vispe.evaluation import report
from vispe.evaluation.report import write_json
from vispe.evaluation.resolution import plot_results, resolution_column
from vispe.evaluation.sweep_engine import replace_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: one config per shapes2d task; the encoding is chosen per run with --cfg-options
SHAPES2D_TASK_CONFIGS = {
    'position': 'configs/vit/vit_tiny_shapes2d_position.py',
    'relation': 'configs/vit/vit_tiny_shapes2d_relation.py',
}


@dataclass
class Run:
    """One training run: ``config`` (relative to the repo root) with ``cfg_options``, in ``work_dir``; ``encoding``
    and ``seed`` label it where the options set them (the leaderboard)."""

    task: str
    config: str
    work_dir: str
    cfg_options: list[str] = field(default_factory=list)
    encoding: str = ''
    seed: int | None = None


def encoding_option(encoding: str) -> str:
    """'rope_mixed+peg' -> the cfg-option selecting that encoding list."""
    names = encoding.split('+')
    value = names[0] if len(names) == 1 else '[' + ','.join(names) + ']'
    return f'model.backbone.encoding={value}'


def schedule_options(epochs: int | None) -> list[str]:
    """Override the number of epochs of the adamw_short schedule (warm-up 1 epoch, then the cosine, which follows the
    run's length by itself)."""
    if epochs is None:
        return []
    if epochs < 2:
        raise ValueError(f'--epochs {epochs}: the schedule has a one-epoch warm-up, so it needs at least 2 epochs')
    return [f'train_cfg.max_epochs={epochs}', f'train_cfg.val_interval={epochs}']


def run_config(run: Run):
    """The run's config with its cfg-options applied, parsed as tools/train.py's --cfg-options parses them."""
    options = dict(o.split('=', 1) for o in run.cfg_options)
    return load_config(os.path.join(ROOT, run.config), {k: parse_option_value(v) for k, v in options.items()})


def final_checkpoint(run: Run) -> str | None:
    """The final checkpoint (last epoch or iteration) of a finished run, or None."""
    pointer = os.path.join(run.work_dir, 'last_checkpoint')
    if not os.path.isfile(pointer):
        return None
    with open(pointer) as f:
        ckpt = f.read().strip()
    return ckpt if os.path.basename(ckpt) == final_checkpoint_name(run_config(run)) and os.path.isfile(ckpt) else None


def final_checkpoint_name(cfg) -> str:
    """'epoch_<max_epochs>.pth', or 'iter_<max_iters>.pth' for iteration-based training (mmengine's names)."""
    train_cfg = cfg.train_cfg
    if train_cfg.get('max_iters') is not None:
        return f'iter_{train_cfg.max_iters}.pth'
    return f'epoch_{train_cfg.max_epochs}.pth'


def _tool(args: Sequence[str], log: Callable[[str], None]) -> None:
    log('$ ' + ' '.join(args))
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True)


def cfg_option_args(run: Run) -> list[str]:
    """The run's cfg-options as tool arguments."""
    return ['--cfg-options', *run.cfg_options] if run.cfg_options else []


def train(run: Run, log: Callable[[str], None] = print) -> str:
    """Train one run with tools/train.py, reusing a finished one and resuming an interrupted one; returns its final
    checkpoint."""
    ckpt = final_checkpoint(run)
    if ckpt:
        log(f'reusing {os.path.relpath(ckpt, ROOT)}')
        return ckpt
    resume = ['--resume'] if os.path.isfile(os.path.join(run.work_dir, 'last_checkpoint')) else []
    _tool(['tools/train.py', run.config, '--work-dir', run.work_dir, *resume, *cfg_option_args(run)], log)
    return final_checkpoint(run)


def train_and_evaluate(run: Run, resolutions: Sequence[str], log: Callable[[str], None] = print) -> dict:
    """Train (or reuse / resume) one run, evaluate it at ``resolutions``; returns its results.json content."""
    options = cfg_option_args(run)
    ckpt = train(run, log)
    eval_dir = os.path.join(run.work_dir, 'eval')
    previous = _previous_results(os.path.join(eval_dir, 'results.json'), ckpt, resolutions, supported_strategies(run))
    if previous is not None:
        log(f'reusing {os.path.relpath(eval_dir, ROOT)}/results.json')
        return previous
    args = ['tools/eval_resolution.py', run.config, ckpt, '--resolutions', *resolutions, '--out', eval_dir]
    _tool([*args, '--no-progress', *replace_args(eval_dir, ckpt), *options], log)
    with open(os.path.join(eval_dir, 'results.json')) as f:
        return json.load(f)


def train_and_sweep(run: Run, tool: str, log: Callable[[str], None] = print) -> dict:
    """Train (or reuse / resume) one run, then evaluate it with a sweep ``tool`` (tools/eval_points.py,
    tools/eval_cameras.py: CONFIG CKPT --out DIR) into ``work_dir/eval`` (reused when newer than the checkpoint);
    returns its results.json."""
    ckpt = train(run, log)
    out = os.path.join(run.work_dir, 'eval')
    path = os.path.join(out, 'results.json')
    if os.path.isfile(path) and os.path.getmtime(path) > os.path.getmtime(ckpt) and _complete(path):
        log(f'reusing {os.path.relpath(path, ROOT)}')
    else:
        _tool(
            [tool, run.config, ckpt, '--out', out, '--no-progress', *replace_args(out, ckpt), *cfg_option_args(run)],
            log,
        )
    with open(path) as f:
        return json.load(f)


def sweep_runs(
    task: str, configs: dict[str, str], labels: Sequence[str], out_dir: str, tool: str, log: Callable[[str], None]
) -> list[dict]:
    """``train_and_sweep`` each labelled config into ``out_dir/<label>``; the rows of all, each with
    ``encoding`` = its run's label (rope3d_mixed is rope3d to the model, gta+plucker two encodings)."""
    rows: list[dict] = []
    for label in labels:
        results = train_and_sweep(Run(task, configs[label], os.path.join(out_dir, label)), tool, log)
        rows += [dict(r, encoding=label) for r in results['results']]
    return rows


def write_summary(out_dir: str, text: str, rows: Sequence[dict], plot: Callable[[Sequence[dict], str], str]) -> str:
    """``out_dir/summary.md`` (``text``), ``summary.json`` (the rows) and ``summary.png`` (``plot(rows, path)``);
    returns the plot's path."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, 'summary.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(out_dir, 'summary.json'), 'w') as f:
        json.dump({'results': list(rows)}, f, indent=2)
    return plot(rows, os.path.join(out_dir, 'summary.png'))


def _previous_results(
    path: str, ckpt: str, resolutions: Sequence[str], strategies: Sequence[str] | None = None
) -> dict | None:
    """An earlier evaluation of the same checkpoint file (not modified since) at the same resolutions and, when
    given, the same strategies (the set a model supports grows as vispe does)."""
    if not os.path.isfile(path) or os.path.getmtime(path) < os.path.getmtime(ckpt):
        return None
    with open(path) as f:
        results = json.load(f)
    if not results.get('complete', True):  # an interrupted sweep, or one with failed cells: run the tool again
        return None
    done = {str(r['resolution']) for r in results['results']}
    same = os.path.abspath(results['checkpoint']) == os.path.abspath(ckpt) and done == set(resolutions)
    if strategies is not None:
        same = same and {r['strategy'] for r in results['results']} == set(strategies)
    return results if same else None


def _complete(path: str) -> bool:
    """Whether a sweep's results.json holds every cell it was asked for (files older than that flag do)."""
    with open(path) as f:
        return json.load(f).get('complete', True)


def supported_strategies(run: Run) -> list[str]:
    """The resolution strategies eval_resolution will sweep for this run's model (built, not trained)."""
    from mmengine.registry import init_default_scope

    from vispe.evaluation.checkpoints import available_strategies
    from vispe.registry import MODELS

    init_default_scope('vispe')
    return available_strategies(MODELS.build(run_config(run).model))


def compare(runs: Sequence[Run], resolutions: Sequence[str], out_dir: str, log: Callable[[str], None] = print) -> dict:
    """Run every comparison run; write ``out_dir/summary.json`` and ``out_dir/summary_<task>.png``."""
    tasks: dict[str, dict] = {}
    for run in runs:
        result = train_and_evaluate(run, resolutions, log)
        entry = tasks.setdefault(run.task, {'train_resolution': result['train_resolution'], 'results': []})
        entry['results'] += [dict(row, task=run.task) for row in result['results']]
    summary = {'metric': 'accuracy', 'resolutions': list(resolutions), 'tasks': tasks, 'runs': [vars(r) for r in runs]}
    summary['json'] = write_json(summary, os.path.join(out_dir, 'summary.json'))
    summary['plots'] = [
        plot_results(
            t['results'],
            os.path.join(out_dir, f'summary_{task}.png'),
            train_resolution=t['train_resolution'],
            title=f'{task}: ' + report.describe({'train_resolution': t['train_resolution']}),
        )
        for task, t in tasks.items()
    ]
    return summary


def markdown_table(rows: Sequence[dict], resolutions: Sequence[str], fmt: str = '.1f') -> str:
    """A markdown table, one line per (encoding, strategy), one column per resolution, values formatted with fmt."""
    table = report.pivot(rows, ('encoding', 'strategy'), resolution_column, columns=resolutions)
    return report.markdown(table, fmt)
