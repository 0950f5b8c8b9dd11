"""LaPE (Yu et al., ICCV 2023): the mixin behind ``lape=True`` of ape_learned, ape_sincos, lff and loope."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from vispe.encodings.base import Encoding
from vispe.positions import Positions


class LayerAdaptive(Encoding):
    """LaPE as an option of an absolute encoding with a table P (``position_table``): block l's attention reads
    LN_l(x_l) + LN'_l(P) (``attn_input``), LN'_l a LayerNorm of its own (eps 1e-6), instead of P added to the tokens
    once; the residual stream never sees P. Departures: the default is the arXiv v1 form, the authors' code chains
    the norms, P_l = LN'_l(P_(l-1)) (``lape_progressive=True``); prefix tokens get nothing."""

    option_hooks = frozenset({'attn_input'})
    #: LaPE on: the table enters every block's attention input through its own LayerNorm, not the token stream
    lape: bool = False
    #: LaPE's chain: block l's LayerNorm reads block l-1's normalised table (the authors' code)
    lape_progressive: bool = False

    def init_lape(self, lape: bool, dim: int, depth: int | None, progressive: bool = False) -> None:
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
        """The table at the N non-prefix tokens, in ``dtype``: (N, D), (1, N, D) or (B, N, D)."""
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
