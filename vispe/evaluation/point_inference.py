"""Classify a user's point-cloud files with a trained point model, in the frame its data set uses."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from vispe.datasets.pointfiles import center, read_points, resample
from vispe.engine.checkpoint import load_checkpoint
from vispe.registry import DATASETS


def dataset_view(cfg, checkpoint: Optional[str] = None) -> Dict:
    """What a file must become to look like the config's test data: ``num_points``, ``frame`` and the class names
    (from the checkpoint's ``dataset_meta``, which mmengine's Runner saves, else the data set class's)."""
    data_cfg = cfg.test_dataloader.dataset
    cls = DATASETS.get(data_cfg.type)
    if cls is None or not hasattr(cls, 'frame'):
        raise ValueError(f'the config tests on {data_cfg.type!r}, not a point-cloud data set such as Primitives3D')
    classes = cls.classes
    if checkpoint is not None:
        meta = load_checkpoint(checkpoint).get('meta') or {}
        classes = (meta.get('dataset_meta') or {}).get('classes') or classes
    return {'num_points': int(data_cfg.get('num_points', 1024)), 'frame': cls.frame, 'classes': tuple(classes)}


def load_cloud(path: str, num_points: int, frame: str) -> torch.Tensor:
    """(num_points, 3) float32: the file's points (or a mesh's surface), farthest-point sampled, then framed."""
    return torch.from_numpy(center(resample(read_points(path), num_points, 'fps'), frame))


@torch.no_grad()
def predict_files(model: torch.nn.Module, paths: Sequence[str], view: Dict, topk: int = 3) -> List[Dict]:
    """Top-k (class, probability) per file, the files prepared as ``view`` (``dataset_view``) says."""
    device = next(model.parameters()).device
    clouds = torch.stack([load_cloud(p, view['num_points'], view['frame']) for p in paths]).to(device)
    probs = model(clouds, mode='tensor').float().softmax(-1)
    names = view['classes']
    if probs.shape[-1] != len(names):
        raise ValueError(f'the model has {probs.shape[-1]} outputs but {len(names)} class names are known')
    top = probs.topk(min(topk, probs.shape[-1]), dim=-1)
    return [
        {'file': path, 'top': [(names[i], float(p)) for p, i in zip(values.tolist(), index.tolist())]}
        for path, values, index in zip(paths, top.values, top.indices)
    ]


__all__ = ['dataset_view', 'load_cloud', 'predict_files']
