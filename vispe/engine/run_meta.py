"""What a model was trained on, written into its checkpoints (``RunMetaHook``) and read back by the evaluation sweeps
(``trained_on``), from the training data set itself rather than the config's helper variables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mmengine.hooks import Hook

from vispe.engine.config_record import RECORD_KEY, config_record
from vispe.registry import HOOKS

#: checkpoint meta key -> the training data set's argument it records
META_KEYS = {'train_resolution': 'image_size', 'train_points': 'num_points', 'train_frames': 'num_frames'}


def _square(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        value = tuple(int(v) for v in value)
        return value[0] if len(value) == 2 and value[0] == value[1] else value
    return int(value)


def _get(node: Any, name: str) -> Any:
    return node.get(name) if isinstance(node, dict) else getattr(node, name, None)


def dataset_chain(dataset: Any, depth: int = 8) -> Iterator[Any]:
    """``dataset`` and the data sets it wraps (objects or config dicts), outermost first, at most ``depth``."""
    for _ in range(depth):
        if dataset is None:
            return
        yield dataset
        dataset = dataset.get('dataset') if isinstance(dataset, dict) else getattr(dataset, 'dataset', None)


def dataset_value(dataset: Any, name: str) -> Any | None:
    """``name`` ('image_size' or 'num_points') of a data set or config, through wrappers; a crop's ``size`` wins."""
    for inner in dataset_chain(dataset):
        if name == 'image_size':
            crops = [_get(t, 'size') for t in (_get(inner, 'transforms') or []) if _get(t, 'size') is not None]
            if crops:
                return _square(crops[-1])
        value = _get(inner, name)
        if value is not None:
            return _square(value)
    return None


def size_policy_text(dataset: Any) -> str | None:
    """A data set's ``size_policy`` as text, or None for one size."""
    for inner in dataset_chain(dataset):
        policy = _get(inner, 'size_policy')
        if policy is None:
            continue
        if isinstance(policy, dict):
            kind = policy.get('type')
            kind = kind if isinstance(kind, str) else getattr(kind, '__name__', str(kind))
            args = ', '.join(f'{k}={v!r}' for k, v in policy.items() if k != 'type')
            text = f'{kind}({args})'
        else:
            kind, text = type(policy).__name__, repr(policy)
        return None if kind == 'FixedSize' else text
    return None


def trained_sizes(cfg, meta: dict | None) -> str | None:
    """The size policy a checkpoint's run trained on (meta, else its config's data set); None for one size."""
    if meta and (meta.get('train_sizes') or meta.get('train_resolution') is not None):
        return meta.get('train_sizes')
    return size_policy_text((cfg.get('train_dataloader') or {}).get('dataset'))


def trained_on(cfg, meta: dict | None, key: str) -> Any | None:
    """``key`` ('train_resolution' or 'train_points') of a checkpoint: its meta, else the config's data set, else the
    config's top-level ``key``; None when none has it or the run trained on several sizes."""
    if key == 'train_resolution' and trained_sizes(cfg, meta):
        return None
    for value in (
        (meta or {}).get(key),
        dataset_value((cfg.get('train_dataloader') or {}).get('dataset'), META_KEYS[key]),
        cfg.get(key),
    ):
        if value is not None:
            return _square(value)
    return None


@HOOKS.register_module()
class RunMetaHook(Hook):
    """Writes into every checkpoint's meta what the model is trained on: the config as data (``config_record``),
    ``train_resolution`` or ``train_sizes``, ``train_points``, ``train_frames``. Takes no arguments."""

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        dataset = self._train_dataset(runner)
        meta = checkpoint.setdefault('meta', {})
        meta[RECORD_KEY] = config_record(runner.cfg)
        sizes = size_policy_text(dataset)
        if sizes:  # several sizes: the policy, and no one training resolution (the nominal one would mislead)
            meta['train_sizes'] = sizes
        for key, name in META_KEYS.items():
            value = dataset_value(dataset, name)
            if value is not None and not (sizes and key == 'train_resolution'):
                meta[key] = value

    @staticmethod
    def _train_dataset(runner) -> Any:
        """The built training data set, or its config when the loop has not built it."""
        loop = getattr(runner, '_train_loop', None)
        loader = getattr(loop, 'dataloader', None) if loop is not None and not isinstance(loop, dict) else None
        if loader is not None and hasattr(loader, 'dataset'):
            return loader.dataset
        return (runner.cfg.get('train_dataloader') or {}).get('dataset')


def align_training_grid(model: Any, cfg: Any, meta: dict | None) -> list[str]:
    """Make ``model``'s encodings' training grid the one the checkpoint's run trained on (cleared for several sizes).

    Returns one line per encoding changed; [] when the checkpoint records nothing or all agrees.
    """
    from vispe.encodings.base import Encoding

    backbone = getattr(model, 'backbone', model)
    patch = getattr(getattr(backbone, 'patch_embed', None), 'patch_size', None)
    sizes, resolution = trained_sizes(cfg, meta), trained_on(cfg, meta, 'train_resolution')
    if patch is None or (sizes is None and resolution is None):
        return []
    ph, pw = (patch, patch) if isinstance(patch, int) else tuple(patch)
    grid = None
    if resolution is not None:  # else several sizes: no grid
        h, w = (resolution, resolution) if isinstance(resolution, int) else resolution
        grid = (-(-h // ph), -(-w // pw))
    trained = f'trained on sizes {sizes}' if sizes else f'trained at {resolution_label(resolution)} px'
    changed: dict[tuple[str, str], list[str]] = {}  # (encoding type, grid as built) -> where
    for name, module in model.named_modules():
        if not isinstance(module, Encoding) or not hasattr(module, 'train_grid'):
            continue
        enc: Any = module  # an encoding with strategies keeps its training grid as a plain attribute
        if enc.train_grid == grid:
            continue
        built = 'no training grid' if enc.train_grid is None else 'the grid {}x{}'.format(*enc.train_grid)
        enc.train_grid = grid
        try:
            enc.strategy = enc.strategy  # the setter checks the strategy against the grid (none: 'none' only)
        except ValueError:
            raise ValueError(
                f'{name or type(enc).__name__}: strategy {enc.strategy!r} scales positions from one training size, '
                f"and the checkpoint was {trained}: evaluate it with strategy 'none'"
            ) from None
        changed.setdefault((type(enc).__name__, built), []).append(name)
    follows = 'no single training grid' if grid is None else '{}x{} tokens'.format(*grid)
    return [
        f'{kind} ({len(names)} module{"s" * (len(names) > 1)}, e.g. {names[0] or "the model"}): the training grid of '
        f'its strategies follows the checkpoint ({trained}: {follows}), not the model as built ({built})'
        for (kind, built), names in changed.items()
    ]


def resolution_label(res: Any, collapse_square: bool = False) -> str:
    """64 -> '64', (48, 64) -> '48x64'; with ``collapse_square`` a square pair or label -> one side."""
    if isinstance(res, str):
        parts = res.lower().split('x')
        return parts[0] if collapse_square and len(parts) == 2 and parts[0] == parts[1] else res
    if not isinstance(res, (list, tuple)):
        return str(res)
    return str(res[0]) if collapse_square and res[0] == res[1] else f'{res[0]}x{res[1]}'


__all__ = [
    'META_KEYS',
    'RunMetaHook',
    'align_training_grid',
    'dataset_chain',
    'dataset_value',
    'resolution_label',
    'size_policy_text',
    'trained_on',
    'trained_sizes',
]
