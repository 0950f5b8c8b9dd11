"""Classification as mmengine models (a vispe ViT on images, a point transformer on clouds): cross-entropy,
top-1 predictions."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel
from torch import nn

from vispe.backbones.vit import create_model
from vispe.registry import MODELS


class Classifier(BaseModel):
    """Cross-entropy classification around a backbone (inputs -> logits) that subclasses build from its config
    (``build_backbone``).

    Args:
        backbone: the backbone's config, as the subclass reads it.
        label_smoothing: cross-entropy label smoothing.
        data_preprocessor: mmengine data preprocessor config (default: move the batch to the device).

    Batches are dicts ``{'inputs': ..., 'labels': (B,)}``. ``mode='loss'`` returns ``{'loss': ...}``,
    ``mode='predict'`` one dict per sample (``pred``, ``label``, ``score``) for the ``Accuracy`` metric, and
    ``mode='tensor'`` the logits.
    """

    def __init__(
        self,
        backbone: Dict[str, Any],
        label_smoothing: float = 0.0,
        data_preprocessor: Optional[dict] = None,
        init_cfg: Optional[dict] = None,
    ) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = self.build_backbone(dict(backbone))
        self.label_smoothing = label_smoothing

    def build_backbone(self, cfg: Dict[str, Any]) -> nn.Module:
        raise NotImplementedError

    def forward(
        self, inputs: torch.Tensor, labels: Optional[torch.Tensor] = None, mode: str = 'tensor'
    ) -> Union[torch.Tensor, Dict[str, torch.Tensor], List[Dict[str, torch.Tensor]]]:
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
    """A vispe ViT classifier for mmengine's Runner: ``backbone`` holds the keyword arguments of
    ``vispe.create_model``: ``model_name`` (any timm ViT name), ``encoding`` and timm keyword arguments (img_size,
    patch_size, embed_dim, num_classes, ...). Other arguments and modes as ``Classifier``; batches are dicts
    ``{'inputs': (B, C, H, W), 'labels': (B,)}``.
    """

    def build_backbone(self, cfg: Dict[str, Any]) -> nn.Module:
        if 'model_name' not in cfg:
            raise ValueError(
                "ImageClassifier needs backbone=dict(model_name='vit_tiny_patch16_224', encoding=..., ...)"
            )
        return create_model(cfg.pop('model_name'), **cfg)


@MODELS.register_module()
class PointClassifier(Classifier):
    """A point-cloud classifier for mmengine's Runner: ``backbone`` is a registry config of a network taking
    (B, N, 3) clouds, e.g. ``dict(type='PointTransformer', num_classes=..., encoding='point_mlp')``. Other
    arguments and modes as ``Classifier``; batches are dicts ``{'inputs': (B, N, 3), 'labels': (B,)}``.
    """

    def build_backbone(self, cfg: Dict[str, Any]) -> nn.Module:
        return MODELS.build(cfg)
