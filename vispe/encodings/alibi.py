"""2D ALiBi: attention with linear biases (Press et al., "Train Short, Test Long", ICLR 2022) on image patches.

ALiBi adds -m_h |i - j| to the logit of query i and key j in head h, with fixed per-head slopes m_h; here the
distance is the Euclidean distance between the patches' (row, col) positions in token-grid units, so the bias
depends only on relative positions and extends to any grid without a table. This 2D form is CROMA's (Fuller et al.,
NeurIPS 2023, ``get_2dalibi``), the reference vispe's is compared with (ALiBi's authors released the 1D one only).

The distance has no sign: a flip or (on a square grid) a transpose of the patch tokens leaves the bias as it was, so
alibi2d alone cannot tell left from right or up from down (in causal language models the mask breaks that symmetry;
in bidirectional vision attention nothing does). Combine it with an encoding that sees direction (``ape_learned``,
a rotary one) where direction matters; on shapes2d ``relation`` alone it stays at chance.
"""

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
    """The ALiBi paper's slopes: for a power of two n, the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8); for
    other counts the n0 = 2^floor(log2 n) slopes of n0, then every other slope of 2 n0 until there are n."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    n0 = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_two(n0) + power_of_two(2 * n0)[0::2][: num_heads - n0]


@ENCODINGS.register_module(name='alibi2d')
class ALiBi2D(Encoding):
    """2D ALiBi logit bias, one instance per attention layer: bias_hij = -scale * m_h * ||p_i - p_j||_2 between
    patches i and j (token-grid units), 0 for any pair with a prefix (cls / register) token, which has no position.

    Args:
        num_heads: heads of the attention, >= 1 (the slopes follow ALiBi's schedule for that many heads).
        scale: multiplies every slope, > 0 (1: the paper's).

    Shapes: logit_bias -> (1, H, N, N) on a grid, (B, H, N, N) for per-sample (sampled) positions.

    Nothing is learned (the slopes are a non-persistent buffer), so the state dict holds nothing of it; at a larger
    grid the distances simply grow, which is ALiBi's own way to extrapolate. Weight decay: nothing to decay.
    Attention path: a float ``attn_mask`` for SDPA; query chunks compute their own rows only. Cost: the whole bias
    once per forward pass (shared by the layers), (N, N) distances and an (H, N, N) product; SDPA then takes it
    into the memory-efficient kernel on CUDA, the math one on CPU only when a bias needs a gradient (never here).
    TorchScript:
    ``torch.jit.script(model)`` scripts its FX graph (VisionTransformerPE); its Python code does not script, as its
    hook takes ``Positions``.
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
        """The whole (1 or B, H, N, N) bias, made once per forward pass and shared by every layer with the same
        slopes (``Positions.tables``): nothing in it is learned, so the layers' biases are one tensor, computed and
        kept for the backward once."""
        name = f'alibi2d bias {self.num_heads} {self.scale} {q.dtype}'
        bias = pos.tables.get(name)
        if bias is None:
            bias = pos.tables[name] = self.logit_bias_rows(q, k, pos)(slice(None))
        return bias

    def geometry(self, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token's (row, col), (1 or B, T, 2) float32 (prefix tokens at the origin), and whether it is a patch,
        (1 or B, T) float32 (0 for prefix and padding tokens, which are masked out of every distance)."""
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
        """The bias inside FlexAttention: each score's distance from the two tokens' coordinates, no N x N tensor."""
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
        """rows -> the bias of the query rows ``rows`` of the sequence (prefix tokens first): (1 or B, H, n, N)."""
        padded, is_patch = self.geometry(pos)

        def rows_of(rows: slice) -> torch.Tensor:
            # (1 or B, n, P + N); written out rather than torch.cdist, whose choice of algorithm by size would be
            # a branch on the token count, which FX and torch.export cannot follow
            dist = (padded[:, rows, None, :] - padded[:, None, :, :]).square().sum(-1).sqrt()
            dist = dist * is_patch[:, rows, None] * is_patch[:, None, :]
            return (-self.slopes[None, :, None, None] * dist[:, None]).to(q.dtype)

        return rows_of
