"""Sample a class-conditional diffusion checkpoint at several resolutions (and rotary strategies) and score it offline.

Per (strategy, resolution): ``samples_per_class`` images per class from the same seeded noise, then
``vispe.evaluation.generation`` metrics (object count and attribute accuracy; FD and KID against real Shapes2D images
rendered at that resolution, in a vispe classifier's feature space, when one is given) and the held-out denoising
loss of the config's test set rendered at that resolution. Results use tools/eval_resolution.py's schema with a
``metric`` key per row::

    {"config", "checkpoint", "train_resolution", "metric": "generation",
     "results": [{"encoding", "strategy", "resolution", "metric", "value"}, ...]}
"""

from __future__ import annotations

import copy
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.evaluator import Evaluator

from vispe.engine.config import load_config
from vispe.evaluation import resolution as R
from vispe.evaluation.generation import ShapesFeatures, generation_metrics
from vispe.registry import DATASETS

#: metrics in the order tables list them; lower is better for the last four
METRICS = ('count_accuracy', 'attribute_accuracy', 'fd', 'kid_mean', 'denoising_mse')
PERCENT = ('count_accuracy', 'color_accuracy', 'shape_accuracy', 'attribute_accuracy')


def load_classifier(config: str, checkpoint: str, device: str) -> ShapesFeatures:
    """The FD / KID feature extractor: a vispe classifier from its config and checkpoint."""
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(
            f'feature-extractor checkpoint {checkpoint!r} not found: train it with '
            f'`python tools/train.py {config}` (about 5 minutes on CPU) and pass its last checkpoint with '
            '--classifier-checkpoint, or use --no-fd to skip FD and KID'
        )
    cfg = load_config(config)
    return ShapesFeatures(R.build_model(cfg, checkpoint, device))


def real_images(cfg, resolution: R.Resolution, split: str, count: int) -> Tuple[torch.Tensor, Dict[str, Any]]:
    """``count`` real images of the config's data set at ``resolution`` (another split than training), and its
    metainfo."""
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
def generate(model, num_classes: int, per_class: int, size, settings: Dict[str, Any], seed: int, batch: int):
    """``per_class`` samples of every class, class-major; the noise depends only on ``seed`` and the size."""
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    generator = torch.Generator().manual_seed(seed)
    images = [model.sample(chunk, size=size, generator=generator, **settings).cpu() for chunk in labels.split(batch)]
    return torch.cat(images), labels


def sweep_generation(
    cfg,
    checkpoint: str,
    resolutions: Sequence[R.Resolution],
    strategies: Optional[Sequence[str]] = None,
    samples_per_class: int = 8,
    classifier: Optional[Tuple[str, str]] = None,
    out_dir: Optional[str] = None,
    device: Optional[str] = None,
    seed: int = 0,
    batch_size: int = 64,
    log=print,
) -> Dict[str, Any]:
    """Sample and score ``checkpoint`` at each resolution and strategy (module doc). ``classifier`` = (config,
    checkpoint) of the FD / KID feature extractor, or None to skip those. Writes a sample grid per (strategy,
    resolution) into ``out_dir`` when given."""
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    model = R.build_model(cfg, checkpoint, device)
    if not hasattr(model, 'sample'):
        raise ValueError(f'{type(model).__name__} cannot sample; eval_generation needs a DiffusionModel config')
    supported = R.available_strategies(model)
    strategies = list(strategies or supported)
    unknown = [s for s in strategies if s not in supported]
    if unknown:
        raise ValueError(f"strategies {unknown} are not supported by this model's encodings; choose from {supported}")
    opts = dict(cfg.get('generation_eval') or {})
    settings = {k: opts[k] for k in ('steps', 'sampler', 'cfg_scale') if k in opts}
    features = load_classifier(*classifier, device) if classifier else None
    num_classes = model.num_classes
    evaluator = Evaluator(copy.deepcopy(cfg.test_evaluator))
    rows: List[Dict[str, Any]] = []
    for res in resolutions:
        label = R.resolution_label(res)
        real, meta = real_images(cfg, res, opts.get('real_split', 'test'), num_classes * samples_per_class)
        loader = R.eval_loader(cfg, res)
        for strategy in strategies:
            if strategy != 'default':
                R.set_strategy(model, strategy)
            log(f'{strategy} @ {label}: sampling {num_classes} x {samples_per_class}')
            fake, labels = generate(model, num_classes, samples_per_class, res, settings, seed, batch_size)
            kwargs = dict(shapes=meta['shapes'], palette=tuple(meta['colors'].values())) if 'shapes' in meta else None
            values: Dict[str, float] = {}
            if kwargs is not None:  # shape_color-like data: object metrics, and FD / KID with the classifier
                scores = generation_metrics(fake, labels, real, features, **kwargs)
                values.update({k: 100 * v if k in PERCENT else v for k, v in scores.items()})
            values['denoising_mse'] = R.evaluate(model, loader, evaluator)['denoising/mse']
            rows += [
                dict(encoding=R.encoding_label(model), strategy=strategy, resolution=res, metric=k, value=v)
                for k, v in values.items()
            ]
            if out_dir:
                shown = min(samples_per_class, 8)
                keep = torch.arange(len(labels)) % samples_per_class < shown
                sample_grid(fake[keep], shown * 2, os.path.join(out_dir, f'samples_{strategy}_{label}.png'))
    return {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'train_resolution': R.train_resolution(cfg),
        'metric': 'generation',
        'settings': dict(settings, samples_per_class=samples_per_class, seed=seed),
        'feature_extractor': os.path.abspath(classifier[1]) if classifier else None,
        'results': rows,
    }


def metric_rows(results: Dict[str, Any], metric: str) -> List[Dict[str, Any]]:
    """The rows of one metric, in eval_resolution's row schema (for its tables and plots)."""
    return [r for r in results['results'] if r['metric'] == metric]


def train_and_generate(
    run, resolutions: Sequence[str], strategies: Optional[Sequence[str]], samples_per_class: int, log=print
) -> Dict[str, Any]:
    """Train (or reuse / resume) one diffusion run with tools/train.py, then sweep it with tools/eval_generation.py
    (reused when the checkpoint, resolutions, strategies, sample count and FD / KID feature extractor are
    unchanged); returns results.json."""
    import json

    from vispe.evaluation.compare import ROOT, _tool, cfg_option_args, run_config, train

    options = cfg_option_args(run)
    ckpt = train(run, log)
    out = os.path.join(run.work_dir, 'generation')
    path = os.path.join(out, 'results.json')
    if os.path.isfile(path) and os.path.getmtime(path) > os.path.getmtime(ckpt):
        with open(path) as f:
            previous = json.load(f)
        same = {str(r['resolution']) for r in previous['results']} == set(resolutions)
        same &= strategies is None or {r['strategy'] for r in previous['results']} == set(strategies)
        same &= previous['settings'].get('samples_per_class') == samples_per_class
        extractor = (run_config(run).get('generation_eval') or {}).get('classifier_checkpoint')
        extractor = os.path.join(ROOT, extractor) if extractor else None  # the tools run from ROOT
        same &= previous.get('feature_extractor') == extractor
        if extractor and os.path.isfile(extractor):
            same &= os.path.getmtime(path) > os.path.getmtime(extractor)
        if same:
            log(f'reusing {os.path.relpath(path, ROOT)}')
            return previous
    args = ['--resolutions', *resolutions, '--samples-per-class', str(samples_per_class), '--out', out]
    _tool(
        ['tools/eval_generation.py', run.config, ckpt, *args, *(['--strategy', *strategies] if strategies else [])]
        + options,
        log,
    )
    with open(path) as f:
        return json.load(f)


__all__ = [
    'METRICS',
    'generate',
    'load_classifier',
    'metric_rows',
    'real_images',
    'sample_grid',
    'sweep_generation',
    'train_and_generate',
]
