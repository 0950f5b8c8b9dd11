"""What every vispe backbone shares: building its encodings from a spec, split into model-level and per-layer."""

from __future__ import annotations

from typing import Any, Iterator, List, Sequence, Tuple

import torch
from torch import nn

from vispe.encodings.build import EncodingSpec, build_encoding, encoding_class, list_encodings, normalize_spec
from vispe.positions import Positions


def build_backbone_encodings(
    spec: EncodingSpec,
    dim: int,
    num_heads: int,
    depth: int,
    grid_size: Sequence[int],
    ndim: int = 2,
    cameras: bool = False,
    **extra_context: Any,
) -> Tuple[nn.ModuleDict, List[nn.ModuleDict]]:
    """Build ``spec`` (a name, a config dict or a list of them) for a ``depth``-block backbone.

    Returns (model_level, per_layer): one ModuleDict of the encodings with embed / after_block hooks, shared by
    the model, and ``depth`` ModuleDicts (one per attention layer, built with ``layer_index=i``) of those with
    attention hooks. An encoding not meant for ``ndim``-D positions raises ValueError listing those that are, and
    so does a camera encoding when the backbone supplies no cameras (``cameras=False``).
    Each encoding receives the backbone context it names: dim, num_heads, ndim, grid_size (the
    training token grid), depth and ``extra_context`` (the multi-view transformer's patch_size). Keys are the
    registry names.
    """
    cfgs = normalize_spec(spec)
    for cfg in cfgs:
        cls = encoding_class(cfg['type'])
        if ndim not in cls.ndims:
            kind = {2: 'image token grids', 3: 'point clouds'}.get(ndim, f'{ndim}D positions')
            raise ValueError(
                f'encoding {cfg["type"]!r} does not work on {ndim}D positions; for {kind} choose one of '
                f'{list_encodings(ndim, cameras)}'
            )
        if cls.needs_cameras and not cameras:
            raise ValueError(
                f'encoding {cfg["type"]!r} needs cameras, which this backbone does not have; use it in the '
                "multi-view transformer (dict(type='MultiViewTransformer', ...))"
            )
    context = dict(dim=dim, num_heads=num_heads, ndim=ndim, grid_size=tuple(grid_size), depth=depth, **extra_context)
    layer_cfgs = [c for c in cfgs if encoding_class(c['type']).per_layer()]
    model_level = nn.ModuleDict(
        {c['type']: build_encoding(c, **context) for c in cfgs if not encoding_class(c['type']).per_layer()}
    )
    per_layer = [
        nn.ModuleDict({c['type']: build_encoding(c, layer_index=i, **context) for c in layer_cfgs})
        for i in range(depth)
    ]
    return model_level, per_layer


class EncodingHost:
    """What a vispe backbone says about its encodings; mixed into backbones that keep model-level encodings in
    ``self.pe`` and per-layer ones in ``self.blocks[i].attn.pe``."""

    @property
    def encoding_names(self) -> List[str]:
        """Registry names of the encodings, model-level first."""
        names = list(self.pe)
        return names + [n for n in self.blocks[0].attn.pe if n not in names] if len(self.blocks) else names

    def encodings(self) -> Iterator[Tuple[str, nn.Module]]:
        """(name, module) of every encoding instance, model-level and per-layer."""
        yield from self.pe.items()
        for blk in self.blocks:
            yield from blk.attn.pe.items()


def apply_embed_hooks(model_level: nn.ModuleDict, x: torch.Tensor, pos: Positions) -> torch.Tensor:
    """The model-level encodings' ``embed`` hooks on the (B, N, D) non-prefix tokens, in order."""
    for enc in model_level.values():
        if 'embed' in enc.active_hooks():
            x = enc.embed(x, pos)
    return x


def apply_after_block_hooks(model_level: nn.ModuleDict, i: int, x: torch.Tensor, pos: Positions) -> torch.Tensor:
    """The ``after_block`` hooks of the encodings that name block ``i``, on its (B, N_total, D) output."""
    for enc in model_level.values():
        if 'after_block' in enc.active_hooks() and i in enc.blocks:
            x = enc.after_block(x, pos)
    return x


__all__ = ['EncodingHost', 'apply_after_block_hooks', 'apply_embed_hooks', 'build_backbone_encodings']
