"""2D ALiBi (Press et al., ICLR 2022) on image patches, in CROMA's form (Fuller et al., NeurIPS 2023): the distance
has no sign, so alone it cannot tell left from right; combine it with an encoding that sees direction."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from vispe.encodings.base import Encoding, check_positive
from vispe.flex import ScoreTerm
from vispe.positions import Positions
from vispe.registry import ENCODINGS


def alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi's slopes: 2^(-8/n), ..., 2^(-8) for a power of two n; else those of n0 = 2^floor(log2 n), then every
    other slope of 2 n0."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    n0 = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_two(n0) + power_of_two(2 * n0)[0::2][: num_heads - n0]


@ENCODINGS.register_module(name='alibi2d')
class ALiBi2D(Encoding):
    """Bias -scale * m_h * ||p_i - p_j||_2 between patches (token-grid units), ALiBi's fixed slopes m_h; 0 for pairs
    with a prefix token. Nothing is learned.

    Args:
        num_heads: attention heads (ALiBi's slope schedule for that many).
        scale: multiplies every slope (1: the paper's).
    """

    slopes: torch.Tensor  # buffer (H,)
    has_score_term = True

    def __init__(self, num_heads: int, scale: float = 1.0) -> None:
        super().__init__()
        check_positive('alibi2d', scale=scale, num_heads=num_heads)
        self.num_heads = num_heads
        self.scale = scale
        slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float32) * scale
        self.register_buffer('slopes', slopes, persistent=False)

    def logit_bias(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> torch.Tensor:
        """The (1 or B, H, N, N) bias, made once per forward pass and shared by the layers (``Positions.tables``)."""
        name = f'alibi2d bias {self.num_heads} {self.scale} {q.dtype}'
        bias = pos.tables.get(name)
        if bias is None:
            bias = pos.tables[name] = self.logit_bias_rows(q, k, pos)(slice(None))
        return bias

    def geometry(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token's (row, col), (1 or B, T, 2) float32, and whether it is a patch, (1 or B, T) float32."""
        coords = pos.coords.float()
        coords = coords.reshape(-1, coords.shape[-2], coords.shape[-1])  # (1 or B, N, 2), with no branch on the rank
        prefix = pos.num_prefix
        padded = nn.functional.pad(coords, (0, 0, prefix, 0))  # (1 or B, P + N, 2)
        if pos.layout is not None:  # a mixed batch: its prefix tokens sit among the patches
            is_patch = pos.layout.patch_mask(coords.device).float()  # (B, T)
        else:
            is_patch = torch.ones(1, padded.shape[1], device=coords.device, dtype=torch.float32)
            is_patch = nn.functional.pad(is_patch[:, prefix:], (prefix, 0))
        return padded, is_patch

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> ScoreTerm:
        padded, is_patch = self.geometry(pos)
        # Python bools from the shapes: the term indexes the sample, or sample 0 of a table shared by the batch
        coords_per_sample, patch_per_sample = padded.shape[0] != 1, is_patch.shape[0] != 1
        slopes = self.slopes

        def term(b, h, q_idx, kv_idx):
            s, p = (b if coords_per_sample else 0), (b if patch_per_sample else 0)
            rows, cols = padded[s, q_idx, 0] - padded[s, kv_idx, 0], padded[s, q_idx, 1] - padded[s, kv_idx, 1]
            dist = (rows * rows + cols * cols).sqrt() * is_patch[p, q_idx] * is_patch[p, kv_idx]
            return -slopes[h] * dist

        return term

    def logit_bias_rows(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> Callable[[slice], torch.Tensor]:
        """rows -> the bias of those query rows, (1 or B, H, n, N)."""
        padded, is_patch = self.geometry(pos)

        def rows_of(rows: slice) -> torch.Tensor:
            # (1 or B, n, P + N); written out rather than torch.cdist, whose choice of algorithm by size would be
            # a branch on the token count, which FX and torch.export cannot follow
            dist = (padded[:, rows, None, :] - padded[:, None, :, :]).square().sum(-1).sqrt()
            dist = dist * is_patch[:, rows, None] * is_patch[:, None, :]
            return (-self.slopes[None, :, None, None] * dist[:, None]).to(q.dtype)

        return rows_of
