"""LaPE (Yu et al., ICCV 2023), the per-layer way in for any absolute encoding: the mixin ``LayerAdaptive`` behind
the option ``lape=True`` of ape_learned, ape_sincos, lff and loope."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from vispe.encodings.base import Encoding
from vispe.positions import Positions


class LayerAdaptive(Encoding):
    """LaPE (Yu et al., ICCV 2023) as an option of an absolute encoding: ``lape=True``.

    Without it the encoding adds its position table P (N, D) to the tokens once (``embed``). With it the tokens
    enter the blocks without P, and block l's attention reads LN_l(x_l) + LN'_l(P): the block's own pre-norm of the
    token stream, plus P through a LayerNorm of its own per layer (``lape_norms[l]``, the ``attn_input`` hook),
    zero at prefix tokens (they carry no position). The residual stream x_l and the MLP branch never see P, and the
    one table P is shared by every layer: what differs per layer is LN'_l's scale and shift. LN'_l starts as
    LayerNorm does (weight 1, bias 0; eps 1e-6, the norm layer of the authors' DeiT). In DiT's adaLN blocks
    LN_l(x_l) is the modulated norm. ``lape_progressive=True`` is the authors' code (Ingrid725/LaPE, the ICCV
    paper's "progressive" delivery): block l reads P_l = LN'_l(P_(l-1)), P_0 = P, the table through every LN' up to
    its own, instead of LN'_l(P) (the default, the arXiv v1 formulation); cost: l + 1 LayerNorms at block l. The
    authors' cls token has an entry of its own; here prefix tokens get nothing, as everywhere in vispe.

    A subclass gives its table as ``position_table(pos, dtype)``, (1 or B, N, D) over the non-prefix tokens; this
    mixin supplies ``embed``, ``attn_input`` and ``active_hooks`` from it (``embed`` without LaPE, ``attn_input``
    with it), and builds the norms with ``init_lape``.

    Cost with LaPE: the table is computed once per block instead of once per forward (a view at the training grid
    for ape_learned, a cached buffer for ape_sincos, lff's MLP per block), plus one (N, D) LayerNorm and add per
    block: small against the block's attention and MLP.

    Weight decay: the LayerNorms' weights and biases are 1-D, so the optimizers leave them undecayed by rule (as
    LaPE trains them); nothing to declare.
    """

    option_hooks = frozenset({'attn_input'})
    #: LaPE on: the table enters every block's attention input through its own LayerNorm, not the token stream
    lape: bool = False
    #: LaPE's chain: block l's LayerNorm reads block l-1's normalised table (the authors' code)
    lape_progressive: bool = False

    def init_lape(self, lape: bool, dim: int, depth: int | None, progressive: bool = False) -> None:
        """Switch LaPE on (``lape``): one LayerNorm of width ``dim`` per block, ``depth`` of them (the backbone's),
        chained with ``progressive``."""
        self.lape, self.lape_progressive = bool(lape), bool(progressive)
        if self.lape_progressive and not self.lape:
            raise ValueError(f'{self.registry_name()}: lape_progressive=True chains the LaPE norms; set lape=True')
        if not self.lape:
            return
        if depth is None or isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(
                f'{self.registry_name()} with lape=True needs depth, the number of blocks (one LayerNorm each); a '
                f'backbone supplies it, a standalone build passes depth=..., got depth={depth!r}'
            )
        self.lape_norms = nn.ModuleList(nn.LayerNorm(dim, eps=1e-6) for _ in range(depth))

    def active_hooks(self) -> frozenset[str]:
        return type(self).hooks() - ({'embed'} if self.lape else {'attn_input'})

    def position_table(self, pos: Positions, dtype: torch.dtype) -> torch.Tensor:
        """The table the encoding adds at the N non-prefix tokens, in ``dtype``: (N, D), (1, N, D) or (B, N, D)."""
        raise NotImplementedError

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x + self.position_table(pos, x.dtype)

    def attn_input(self, x: torch.Tensor, pos: Positions, i: int) -> torch.Tensor:
        norms = list(self.lape_norms[: i + 1]) if self.lape_progressive else [self.lape_norms[i]]
        term = self.position_table(pos, cast(nn.LayerNorm, norms[-1]).weight.dtype)
        for norm in norms:  # LN'_i(P), or LN'_i(...LN'_0(P)) with lape_progressive
            term = norm(term)
        term = term.to(x.dtype)  # (1 or B, N, D)
        if pos.layout is not None:  # a mixed batch: prefix and padding tokens sit inside the rows, and get nothing
            return x + torch.where(pos.layout.patch_mask(x.device)[..., None], term, term.new_zeros(()))
        p = pos.num_prefix
        return torch.cat([x[:, :p], x[:, p:] + term], dim=1) if p else x + term

    def extra_repr(self) -> str:
        return f'lape={self.lape}, lape_progressive={self.lape_progressive}'
