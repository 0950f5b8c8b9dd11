"""Sample a class-conditional diffusion checkpoint at several resolutions and strategies and score it offline.

Per (strategy, resolution), one ``vispe.sweeps.engine`` cell: ``samples_per_class`` images per class from the same
seeded noise, scored by ``vispe.evaluation.generation_metrics`` (FD and KID when a feature classifier is given), and the
held-out denoising loss. Rows follow eval_resolution's schema with a ``metric`` each::

    {"config", "checkpoint", "train_resolution", "metric": "generation",
     "results": [{"encoding", "strategy", "resolution", "metric", "value"}, ...]}
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch

from vispe.encodings.rotary_scaling import DYPE_STRATEGIES
from vispe.engine.checkpoint import checkpoints_inside
from vispe.engine.config import load_config
from vispe.evaluation import figures, report, trained_model
from vispe.evaluation.generation_metrics import ShapesFeatures, generation_metrics
from vispe.files import check_file
from vispe.registry import DATASETS
from vispe.sweeps import resolution as resolution_sweep
from vispe.sweeps.engine import Cell, run_sweep
from vispe.sweeps.identity import file_sha256, sweep_identity
from vispe.sweeps.registry import SWEEPS
from vispe.sweeps.settings import SettingsEvaluator

#: metrics in the order tables list them; lower is better for the last four
METRICS = ('count_accuracy', 'attribute_accuracy', 'fd', 'kid_mean', 'denoising_mse')
PERCENT = ('count_accuracy', 'color_accuracy', 'shape_accuracy', 'attribute_accuracy')


def load_classifier(config: str, checkpoint: str, device: str) -> ShapesFeatures:
    """The FD / KID feature extractor: a vispe classifier from its config and checkpoint."""
    check_file(
        checkpoint,
        'feature-extractor checkpoint',
        f'feature-extractor checkpoint {checkpoint!r} not found: train it with '
        f'`vispe train {config}` (`python tools/train.py` in a checkout; about 5 minutes on CPU) and pass its last '
        'checkpoint with --classifier-checkpoint, or use --no-fd to skip FD and KID',
        checkpoints_inside,
    )
    cfg = load_config(config)
    return ShapesFeatures(trained_model.build_model(cfg, checkpoint, device))


def real_images(
    cfg, resolution: trained_model.Resolution, split: str, count: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``count`` real images of the config's data set (not the training split) at ``resolution``, and its metainfo."""
    dataset_cfg = copy.deepcopy(cfg.test_dataloader.dataset)
    dataset_cfg.update(split=split, image_size=resolution, num_samples=count)
    dataset = DATASETS.build(dataset_cfg)
    return torch.stack([dataset[i]['inputs'] for i in range(count)]), dict(dataset.metainfo)


def sample_grid(images: torch.Tensor, nrow: int, path: str) -> str:
    """Save images in [-1, 1] as one PNG grid, ``nrow`` per row."""
    from torchvision.utils import save_image

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_image((images.float() + 1) / 2, path, nrow=nrow, padding=1, pad_value=0.5)
    return path


@torch.no_grad()
def generate(model, num_classes: int, per_class: int, size, settings: dict[str, Any], seed: int, batch: int):
    """``per_class`` samples of every class, class-major; the noise depends only on ``seed`` and the size."""
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    generator = torch.Generator().manual_seed(seed)
    images = [model.sample(chunk, size=size, generator=generator, **settings).cpu() for chunk in labels.split(batch)]
    return torch.cat(images), labels


def plot(results: dict[str, Any], path: str) -> str:
    """results.json's figure: one panel per metric against resolution, one line per (encoding, strategy)."""
    metrics = list(dict.fromkeys(r['metric'] for r in results['results'])) or ['(no results)']
    fig, axes = figures.plt().subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8), dpi=120, squeeze=False)
    train = results.get('train_resolution')
    for ax, metric in zip(axes[0], metrics):
        table = resolution_sweep.results_pivot(metric_rows(results, metric), ordered=True)
        figures.draw_lines(
            ax, table, resolution_sweep.line_label, None if train is None else trained_model.resolution_label(train)
        )
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel('test resolution (H x W)')
    figures.legend_outside(axes[0][-1])
    title = report.describe(results)
    if title:
        fig.suptitle(title, fontsize=8)
    return figures.save_figure(fig, path)


@SWEEPS.register(
    'generation',
    plot=plot,
    fields=('encoding', 'strategy'),
    column=resolution_sweep.merged_column,
    order=report.resolution_order,
    xlabel='test resolution (H x W)',
    row_metric='metric',
    command='eval-generation',
    about='sample a diffusion checkpoint at unseen resolutions and score it',
    main='vispe.cli.eval_generation',
)
def sweep_generation(
    cfg,
    checkpoint: str,
    resolutions: Sequence[trained_model.Resolution],
    strategies: Sequence[str] | None = None,
    samples_per_class: int = 8,
    classifier: tuple[str, str] | None = None,
    out_dir: str | None = None,
    device: str | None = None,
    seed: int = 0,
    batch_size: int = 64,
    log=print,
    force: bool = False,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Sample and score ``checkpoint`` at each resolution and strategy, one cell each (``run_sweep`` into ``out_dir``,
    plus a sample grid per cell); ``classifier``: (config, checkpoint) of the FD / KID feature extractor, or None. Out
    of memory, a cell halves its sampling batch."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model, meta = trained_model.load_model(cfg, checkpoint, device)
    if not hasattr(model, 'sample'):
        raise ValueError(f'{type(model).__name__} cannot sample; eval_generation needs a DiffusionModel config')
    strategies = trained_model.check_strategies(model, strategies or generation_strategies(model))
    trained_model.check_resolutions(model, resolutions)
    num_classes: int = model.num_classes  # type: ignore[assignment]  # a DiffusionModel's
    opts = dict(cfg.get('generation_eval') or {})
    settings = {k: opts[k] for k in ('steps', 'sampler', 'cfg_scale') if k in opts}
    features = load_classifier(*classifier, device) if classifier else None
    label, evaluator = trained_model.encoding_label(model, meta), SettingsEvaluator(cfg, model)
    reals: dict[str, tuple[torch.Tensor, dict[str, Any]]] = {}  # per resolution, made when a cell first needs them

    def cell(res: trained_model.Resolution, strategy: str) -> Cell:
        key = {'encoding': label, 'strategy': strategy, 'resolution': res}
        size = trained_model.resolution_label(res)
        name = f'{strategy} @ {size}'

        def run(batch: int) -> list[dict[str, Any]]:
            if strategy != 'default':
                trained_model.set_strategy(model, strategy)
            if size not in reals:
                count = num_classes * samples_per_class
                reals[size] = real_images(cfg, res, opts.get('real_split', 'test'), count)
            real, info = reals[size]
            log(f'{name}: sampling {num_classes} x {samples_per_class} (batch {batch})')
            fake, labels = generate(model, num_classes, samples_per_class, res, settings, seed, batch)
            values = object_metrics(fake, labels, real, info, features)
            loader_batch = max(1, evaluator.batch_size * batch // batch_size)
            values['denoising_mse'] = evaluator.metrics({'image_size': res}, loader_batch, strategy)['denoising/mse']
            if out_dir:
                save_grid(fake, labels, samples_per_class, os.path.join(out_dir, f'samples_{strategy}_{size}.png'))
            return [dict(key, metric=k, value=v) for k, v in values.items()]

        return Cell(name, key, run, batch_size)

    extractor = os.path.abspath(classifier[1]) if classifier else None
    run_settings = dict(settings, samples_per_class=samples_per_class, seed=seed)
    header = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        **trained_model.training_record(cfg, meta),
        'metric': 'generation',
        'settings': run_settings,
        'feature_extractor': extractor,
        **trained_model.trained_config(meta),
    }
    identity = sweep_identity(
        'generation',
        cfg,
        checkpoint,
        settings=run_settings,
        feature_extractor_sha256=file_sha256(extractor) if extractor else None,
    )
    cells = [cell(res, strategy) for res in resolutions for strategy in strategies]
    return run_sweep(cells, header, identity, out_dir, force, show_progress, log)


def generation_strategies(model: torch.nn.Module) -> list[str]:
    """A classifier sweep's strategies plus DyPE's (``dype_ntk``, ``dype_yarn``) where the encodings have them."""
    default = trained_model.available_strategies(model)
    dype = [
        s for s in trained_model.available_strategies(model, opt_in=True) if s in DYPE_STRATEGIES and s not in default
    ]
    return [*default, *dype]


def object_metrics(fake, labels, real, info: dict[str, Any], features) -> dict[str, float]:
    """Object count and attribute accuracy (%), and FD / KID with a feature extractor, for shape_color-like data sets;
    {} for others."""
    if 'shapes' not in info:
        return {}
    palette = tuple(info['colors'].values())
    scores = generation_metrics(fake, labels, real, features, shapes=info['shapes'], palette=palette)
    return {k: 100 * v if k in PERCENT else v for k, v in scores.items()}


def save_grid(fake: torch.Tensor, labels: torch.Tensor, per_class: int, path: str) -> str:
    """Up to 8 samples of each class, two classes per grid row."""
    shown = min(per_class, 8)
    keep = torch.arange(len(labels)) % per_class < shown
    return sample_grid(fake[keep], shown * 2, path)


def metric_rows(results: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """The rows of one metric, in eval_resolution's row schema (for its tables and plots)."""
    return [r for r in results['results'] if r['metric'] == metric]


def feature_extractor(cfg, config: str | None = None, checkpoint: str | None = None) -> tuple[Any, Any] | None:
    """The FD / KID extractor (classifier config, checkpoint): given, else the config's ``generation_eval``, or None."""
    opts = cfg.get('generation_eval') or {}
    if not (opts or checkpoint):
        return None
    return config or opts.get('classifier_config'), checkpoint or opts.get('classifier_checkpoint')


__all__ = [
    'METRICS',
    'evaluate_generation',
    'feature_extractor',
    'generate',
    'load_classifier',
    'metric_rows',
    'plot',
    'real_images',
    'sample_grid',
    'sweep_generation',
]

#: a diffusion checkpoint sampled and scored at several resolutions into ``out_dir``, then its plot there
evaluate_generation = SWEEPS['generation'].evaluate
