"""3D localisation from several views as an mmengine model: regress a point of the scene in the world frame."""

from __future__ import annotations

from typing import Any

import torch
from kornia.geometry.linalg import transform_points
from mmengine.model import BaseModel

from vispe.registry import MODELS


@MODELS.register_module()
class MultiViewLocalizer(BaseModel):
    """Predict a world-frame 3D point (the target's centre) from V posed views: the backbone's output y, in the first
    view's camera frame, goes to the world as x_world = T_0 y. Batches hold ``inputs`` (B, V, 3, H, W), ``K``,
    ``cam_to_world``, ``target`` (B, 3) and optional ``depth``. ``mode='loss'``: mean Euclidean error plus the
    encodings' auxiliary losses; ``'predict'``: ``{pred, target}`` per sample; ``'tensor'``: (B, 3).

    Args:
        backbone: registry config of a multi-view network ``(images, K, cam_to_world) -> (B, 3)``.
        data_preprocessor: mmengine data preprocessor config.
        init_cfg: mmengine weight-initialisation config; None: the modules' own.
    """

    def __init__(
        self, backbone: dict[str, Any], data_preprocessor: dict | None = None, init_cfg: dict | None = None
    ) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = MODELS.build(dict(backbone))
        self._takes_depth = hasattr(self.backbone, 'forward_with_losses')

    def forward(
        self,
        inputs: torch.Tensor,
        K: torch.Tensor,
        cam_to_world: torch.Tensor,
        target: torch.Tensor | None = None,
        mode: str = 'tensor',
        depth: torch.Tensor | None = None,
        **unused: Any,
    ) -> torch.Tensor | dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]:
        aux: dict[str, torch.Tensor] = {}
        if self._takes_depth:  # the views' depth maps reach the encodings (3DPPE), and their losses come back
            local, aux = self.backbone.forward_with_losses(inputs, K, cam_to_world, depth)
        else:
            local = self.backbone(inputs, K, cam_to_world)
        local = local.float()  # (B, 3) in view 0's camera frame
        world = transform_points(cam_to_world[:, 0].float(), local[:, None])[:, 0]
        if mode == 'tensor':
            return world
        if target is None:
            raise ValueError(f"mode={mode!r} needs the target point in the batch ('target' key)")
        if mode == 'loss':
            return {'loss': (world - target.float()).norm(dim=-1).mean(), **aux}
        if mode == 'predict':
            return [{'pred': p, 'target': t} for p, t in zip(world.detach(), target)]
        raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")


__all__ = ['MultiViewLocalizer']
