"""Classification as mmengine models (images, point clouds, clips): cross-entropy, top-1 predictions."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel
from torch import nn

from vispe.backbones import create_model
from vispe.registry import MODELS, closest

BATCH_KEYS = ('inputs', 'labels')
#: batch keys a classifier accepts and does not use: ``crop``, the box ``RandomResizedCropBox`` reports (a
#: micro-condition for generators), so that one data pipeline serves both
IGNORED_BATCH_KEYS = ('crop',)


class Classifier(BaseModel):
    """Cross-entropy classification around a backbone (inputs -> logits) that subclasses build (``build_backbone``).
    Batches are dicts ``{'inputs': ..., 'labels': (B,)}``, optionally with a ``crop`` box (ignored); any other key
    raises TypeError naming it. ``mode='loss'``: ``{'loss': ...}``; ``'predict'``: one ``{pred, label, score}`` per
    sample (``Accuracy``); ``'tensor'``: the logits.

    Args:
        backbone: the backbone's config, as the subclass reads it.
        label_smoothing: cross-entropy label smoothing.
        data_preprocessor: mmengine data preprocessor config (None: mmengine's default).
        init_cfg: mmengine weight-initialisation config; None: the modules' own.
    """

    def __init__(
        self,
        backbone: dict[str, Any],
        label_smoothing: float = 0.0,
        data_preprocessor: dict | None = None,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = self.build_backbone(dict(backbone))
        self.label_smoothing = label_smoothing

    def build_backbone(self, cfg: dict[str, Any]) -> nn.Module:
        raise NotImplementedError

    def class_count(self) -> int | None:
        """The number of logits: the backbone's ``num_classes`` (0: no head), or None when it does not say."""
        count = getattr(self.backbone, 'num_classes', None)
        return int(count) if count is not None else None

    def _run_forward(self, data: Any, mode: str) -> Any:
        if isinstance(data, dict):
            known = BATCH_KEYS + IGNORED_BATCH_KEYS
            unknown = [key for key in data if key not in known]
            if unknown:
                hints = '; '.join(f'{key!r}{closest(key, known)}' for key in unknown)
                raise TypeError(
                    f'{type(self).__name__} got batch key(s) {hints}: it takes {", ".join(BATCH_KEYS)} (and ignores '
                    f'{", ".join(IGNORED_BATCH_KEYS)}); rename or drop the key in the data set or its transforms'
                )
        return super()._run_forward(data, mode)

    def forward(
        self,
        inputs: torch.Tensor | list[torch.Tensor],
        labels: torch.Tensor | None = None,
        mode: str = 'tensor',
        crop: torch.Tensor | None = None,
    ) -> torch.Tensor | dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]:
        logits = self.backbone(inputs)  # (B, num_classes)
        if mode == 'tensor':
            return logits
        if labels is None:
            raise ValueError(f"mode={mode!r} needs labels in the batch ('labels' key)")
        if mode == 'loss':
            return {'loss': F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)}
        if mode == 'predict':
            scores = logits.float().softmax(-1)
            return [{'pred': s.argmax(), 'score': s.max(), 'label': y} for s, y in zip(scores, labels)]
        raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")


@MODELS.register_module()
class ImageClassifier(Classifier):
    """A vispe ViT classifier; ``backbone`` holds ``vispe.create_model``'s keyword arguments, ``inputs`` are
    (B, C, H, W) or a list of (C, H_i, W_i) images of mixed sizes. Arguments: as `Classifier`."""

    def build_backbone(self, cfg: dict[str, Any]) -> nn.Module:
        if 'model_name' not in cfg:
            raise ValueError(
                "ImageClassifier needs backbone=dict(model_name='vit_tiny_patch16_224', encoding=..., ...)"
            )
        return create_model(cfg.pop('model_name'), **cfg)


class RegistryClassifier(Classifier):
    """A classifier whose ``backbone`` is a registry config (``dict(type=..., ...)``), built by ``MODELS``."""

    def build_backbone(self, cfg: dict[str, Any]) -> nn.Module:
        return MODELS.build(cfg)


@MODELS.register_module()
class PointClassifier(RegistryClassifier):
    """A point-cloud classifier: ``backbone`` configures a network on (B, N, 3) clouds. Arguments: as `Classifier`."""


@MODELS.register_module()
class VideoClassifier(RegistryClassifier):
    """A video classifier: ``backbone`` configures a network on (B, C, T, H, W) clips or a list of them.
    Arguments: as `Classifier`."""
