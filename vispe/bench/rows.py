"""Benchmark rows that are not an encoding of the benchmark's model (``subjects`` builds them):

* ``timm:<name>`` / ``vispe:<name>`` (model level): a whole model, randomly initialised, at the benchmark's image size
  and model arguments: timm's own model against vispe's of that name (Eva ``vit_small_patch16_rope_mixed_224``,
  DINOv3 ``vit_small_patch16_dinov3``); ``vispe:vit_small_patch16_224`` is that model's ``ape_learned`` row.
* ``sdpa_bias`` (attention level): the ``sdpa`` layer with a learned (1, H, N, N) float mask, its gradient computed:
  the floor under any encoding that adds a logit bias.
"""

from __future__ import annotations

from typing import Any

import timm
import torch
from torch import nn

from vispe.attention import Attention
from vispe.bench.config import BenchmarkConfig
from vispe.positions import Positions
from vispe.registry import closest

#: the attention-level row with a learned bias and no encoding
SDPA_BIAS = 'sdpa_bias'
#: row prefixes naming a whole model: timm's own, or vispe's model of the same timm name
MODEL_ROW_PREFIXES = ('timm:', 'vispe:')


def is_model_row(row: str) -> bool:
    """Whether ``row`` names a whole model ('timm:<name>' or 'vispe:<name>') rather than an encoding."""
    return row.startswith(MODEL_ROW_PREFIXES)


def check_model_row(row: str, level: str) -> None:
    """A model row at model level, naming a model timm knows (vispe's names are registered with timm); else one
    ValueError saying what to fix."""
    if level != 'model':
        raise ValueError(f'row {row!r} is a whole model: it runs at --level model, not {level}')
    name = row.split(':', 1)[1]
    if not timm.is_model(name):
        hint = closest(name, timm.list_models(name.split('_')[0] + '*'))
        raise ValueError(f'row {row!r}: {name!r} is not a timm model name{hint}')


def build_model_row(row: str, cfg: BenchmarkConfig) -> nn.Module:
    """The model a 'timm:<name>' or 'vispe:<name>' row names, built on the CPU from ``cfg.seed``, at ``cfg``'s image
    size and with its model arguments, untrained (``pretrained=False``: nothing is downloaded)."""
    source, name = row.split(':', 1)
    kwargs: dict[str, Any] = dict(img_size=cfg.img_size, **cfg.model_kwargs)
    torch.manual_seed(cfg.seed)
    if source == 'timm':
        return timm.create_model(name, pretrained=False, **kwargs)
    from vispe.backbones import create_model

    return create_model(name, pretrained=False, **kwargs)


class LearnedBiasAttention(nn.Module):
    """The ``sdpa_bias`` row: a plain attention layer whose SDPA gets a learned (1, H, N, N) float mask."""

    def __init__(self, attn: Attention, num_tokens: int) -> None:
        super().__init__()
        self.attn = attn
        # small random values, as a learned relative-position bias holds
        self.bias = nn.Parameter(torch.randn(1, attn.num_heads, num_tokens, num_tokens) * 0.02)

    def forward(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        # under autocast SDPA casts the mask to q's dtype, as vispe's bias encodings do themselves (merged_mask)
        return self.attn(x, pos, attn_mask=self.bias)


__all__ = [
    'MODEL_ROW_PREFIXES',
    'SDPA_BIAS',
    'LearnedBiasAttention',
    'build_model_row',
    'check_model_row',
    'is_model_row',
]
