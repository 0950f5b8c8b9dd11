"""Evaluate one checkpoint at several resolutions (and resolution strategies), as data and as a plot.

The JSON schema written by ``tools/eval_resolution.py``::

    {"config": ..., "checkpoint": ..., "train_resolution": ..., "metric": "accuracy",
     "results": [{"encoding": ..., "strategy": ..., "resolution": ..., "value": ...}, ...]}
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from vispe.engine.checkpoint import load_checkpoint
from vispe.registry import MODELS

Resolution = Union[int, Tuple[int, int]]


def parse_resolution(text: str) -> Resolution:
    """'64' -> 64, '48x64' -> (48, 64) (height x width)."""
    parts = text.lower().split('x')
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f'resolution {text!r} is not an int or HxW (e.g. 64 or 48x64)') from None
    if len(values) not in (1, 2) or min(values) <= 0:
        raise ValueError(f'resolution {text!r} is not a positive int or HxW (e.g. 64 or 48x64)')
    return values[0] if len(values) == 1 else (values[0], values[1])


def resolution_label(res: Resolution) -> str:
    return str(res) if isinstance(res, int) else f'{res[0]}x{res[1]}'


def train_resolution(cfg) -> Resolution:
    """The config's training resolution: ``train_resolution`` or the training dataset's image_size."""
    res = cfg.get('train_resolution') or cfg.train_dataloader.dataset.get('image_size')
    if res is None:
        raise ValueError('config has neither train_resolution nor train_dataloader.dataset.image_size')
    return res if isinstance(res, int) else tuple(res)


def build_model(cfg, checkpoint: str, device: str) -> torch.nn.Module:
    init_default_scope(cfg.get('default_scope', 'vispe'))
    model = MODELS.build(copy.deepcopy(cfg.model))
    load_checkpoint(checkpoint, model)
    return model.to(device).eval()


def model_encodings(model: torch.nn.Module) -> List[Any]:
    """Every encoding instance in the model."""
    from vispe.encodings.base import Encoding

    return [m for m in model.modules() if isinstance(m, Encoding)]


def encoding_label(model: torch.nn.Module) -> str:
    backbone = getattr(model, 'backbone', model)
    names = getattr(backbone, 'encoding_names', None)
    return '+'.join(names) if names else 'none'


def available_strategies(model: torch.nn.Module) -> List[str]:
    """Resolution strategies the model's encodings support, defaults first; ['default'] when none do."""
    seen: List[str] = []
    for enc in model_encodings(model):
        for s in type(enc).strategies:
            if s not in seen:
                seen.append(s)
    return seen or ['default']


def set_strategy(model: torch.nn.Module, strategy: str) -> None:
    """Switch every encoding that supports ``strategy``; others keep their own."""
    for enc in model_encodings(model):
        if strategy in type(enc).strategies:
            enc.strategy = strategy


@torch.no_grad()
def evaluate(model, loader, evaluator: Evaluator, progress=None, task=None) -> Dict[str, float]:
    """One pass over ``loader`` with model.test_step; returns the evaluator's metrics."""
    for batch in loader:
        evaluator.process(data_samples=model.test_step(batch), data_batch=batch)
        if progress is not None:
            progress.advance(task)
    return evaluator.evaluate(len(loader.dataset))


def eval_loader(cfg, resolution: Resolution):
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.dataset.image_size = resolution
    return Runner.build_dataloader(loader_cfg, seed=0)


def sweep(
    cfg,
    checkpoint: str,
    resolutions: Sequence[Resolution],
    strategies: Optional[Sequence[str]] = None,
    device: Optional[str] = None,
    metric_key: str = 'accuracy/top1',
    show_progress: bool = True,
) -> Dict[str, Any]:
    """Evaluate ``checkpoint`` at each resolution and strategy; returns the results dict (schema above)."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model = build_model(cfg, checkpoint, device)
    supported = available_strategies(model)
    strategies = list(strategies or supported)
    unknown = [s for s in strategies if s not in supported]
    if unknown:
        raise ValueError(f"strategies {unknown} are not supported by this model's encodings; choose from {supported}")
    loaders = {resolution_label(r): (r, eval_loader(cfg, r)) for r in resolutions}
    evaluator = Evaluator(copy.deepcopy(cfg.test_evaluator))
    rows = []
    with progress_bar(show_progress) as progress:
        total = len(strategies) * sum(len(loader) for _, loader in loaders.values())
        task = progress.add_task('evaluating', total=total) if progress else None
        for strategy in strategies:
            if strategy != 'default':
                set_strategy(model, strategy)
            for label, (res, loader) in loaders.items():
                if progress:
                    progress.update(task, description=f'{strategy} @ {label}')
                metrics = evaluate(model, loader, evaluator, progress, task)
                rows.append(
                    {
                        'encoding': encoding_label(model),
                        'strategy': strategy,
                        'resolution': res,
                        'value': metrics[metric_key],
                    }
                )
    return {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'train_resolution': train_resolution(cfg),
        'metric': metric_key.split('/')[0],
        'results': rows,
    }


class _NoProgress:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def progress_bar(show: bool):
    """A rich progress bar (a context manager giving it), or one giving None when ``show`` is False."""
    if not show:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn('{task.description}'), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())


def write_json(results: Dict[str, Any], path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(results, f, indent=2)
    return path


def results_table(rows: Iterable[Dict[str, Any]], title: str = '', metric: str = 'accuracy', fmt: str = '.1f'):
    """A rich Table: one row per (encoding, strategy), one column per resolution; values formatted with ``fmt``."""
    from rich.table import Table

    rows = list(rows)
    resolutions = list(dict.fromkeys(resolution_label(r['resolution']) for r in rows))
    table = Table(title=title or f'{metric} by test resolution')
    table.add_column('encoding')
    table.add_column('strategy')
    for res in resolutions:
        table.add_column(res, justify='right')
    for (enc, strat), cells in _group(rows).items():
        table.add_row(enc, strat, *[format(cells[r], fmt) if r in cells else '-' for r in resolutions])
    return table


def _group(rows: Iterable[Dict[str, Any]]) -> Dict[Tuple[str, str], Dict[str, float]]:
    grouped: Dict[Tuple[str, str], Dict[str, float]] = {}
    for r in rows:
        grouped.setdefault((r['encoding'], r['strategy']), {})[resolution_label(r['resolution'])] = r['value']
    return grouped


def plot_results(rows: Iterable[Dict[str, Any]], path: str, metric: str = 'accuracy', train_resolution=None) -> str:
    """Metric against resolution, one line per (encoding, strategy); saved as PNG."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for (enc, strat), cells in _group(rows).items():
        labels = list(cells)
        xs = [_pixels(label) for label in labels]
        ax.plot(xs, list(cells.values()), marker='o', label=enc if strat in ('default',) else f'{enc} ({strat})')
    if train_resolution is not None:
        ax.axvline(_pixels(resolution_label(train_resolution)), color='grey', linestyle=':', label='train resolution')
    ax.set_xlabel('test resolution (pixels, height x width)')
    ax.set_ylabel(f'{metric} (%)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def save_figure(fig, path: str) -> str:
    """Tight layout, write ``path`` (creating its folder), close the figure; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _pixels(label: str) -> float:
    """Plot position of a resolution label: the side for squares, the geometric mean otherwise."""
    parts = [int(p) for p in label.split('x')]
    return float(parts[0]) if len(parts) == 1 else (parts[0] * parts[1]) ** 0.5
