"""``EncodingStack``: the one place that calls encoding hooks (the contract: ``vispe.encodings.base.HOOK_TABLE``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch import nn

from vispe.encodings.base import HOOK_TABLE, Encoding
from vispe.flex import ScoreTerm
from vispe.positions import Positions


class EncodingStack:
    """The encodings of one or more ``pe`` dicts, with one method per hook phase, each calling the encodings whose
    ``active_hooks()`` hold it, in order. A view rebuilt per forward: the dicts keep owning the encodings."""

    __slots__ = ('encodings',)

    def __init__(self, *levels: Mapping[str, Encoding] | nn.ModuleDict) -> None:
        # a ModuleDict holds Modules as far as its type says; a ``pe`` dict holds Encodings
        self.encodings: tuple[Encoding, ...] = tuple(cast(Encoding, enc) for level in levels for enc in level.values())

    def __len__(self) -> int:
        return len(self.encodings)

    def with_hook(self, hook: str) -> list[Encoding]:
        """The encodings the stack calls for ``hook``, in order (ValueError for a name outside the contract)."""
        if hook not in HOOK_TABLE:
            raise ValueError(f'{hook!r} is not an encoding hook; the hooks are {list(HOOK_TABLE)}')
        return [enc for enc in self.encodings if hook in enc.active_hooks()]

    # --- model-level phases (the backbone) ---------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        for enc in self.with_hook('embed'):
            x = enc.embed(x, pos)
        return x

    def after_block(self, i: int, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        """The ``after_block`` hooks of the encodings whose ``blocks`` name block ``i`` (a Python int)."""
        for enc in self.with_hook('after_block'):
            if i in enc.blocks:
                x = enc.after_block(x, pos)
        return x

    def attn_input(self, i: int, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        for enc in self.with_hook('attn_input'):
            x = enc.attn_input(x, pos, i)
        return x

    def attn_input_fn(self, i: int, pos: Positions) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Block ``i``'s ``attn_input`` argument, ``x -> attn_input(i, x, pos)``; None when no encoding uses it."""
        if not self.with_hook('attn_input'):
            return None
        return lambda x: self.attn_input(i, x, pos)

    # --- attention phases, in call order ------------------------------------------------------------------------------
    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        for enc in self.with_hook('rotate'):
            q, k = enc.rotate(q, k, pos)
        return q, k

    def transform_v(self, v: torch.Tensor, pos: Positions) -> torch.Tensor:
        for enc in self.with_hook('transform_v'):
            v = enc.transform_v(v, pos)
        return v

    def logit_biases(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> list[torch.Tensor]:
        return [enc.logit_bias(q, k, pos) for enc in self.with_hook('logit_bias')]

    def logit_bias_rows(
        self, q: torch.Tensor, k: torch.Tensor, pos: Positions
    ) -> list[Callable[[slice], torch.Tensor]]:
        return [enc.logit_bias_rows(q, k, pos) for enc in self.with_hook('logit_bias')]

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> list[ScoreTerm]:
        return [enc.score_term(q, k, pos) for enc in self.with_hook('logit_bias')]

    def weighted(self) -> list[Encoding]:
        """The value-term encodings whose instance ``needs_attn_weights``."""
        return [enc for enc in self.with_hook('value_term') if enc.needs_attn_weights]

    def weighted_terms(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor, rows: slice = slice(None)
    ) -> list[torch.Tensor]:
        """The ``weighted()`` value terms of the query rows ``rows``, from their (B, H, n, N) softmax weights."""
        return [enc.value_term(v, pos, attn, rows) for enc in self.weighted()]

    def transform_out(self, out: torch.Tensor, pos: Positions) -> torch.Tensor:
        for enc in self.with_hook('transform_out'):
            out = enc.transform_out(out, pos)
        return out

    def value_terms(
        self, out: torch.Tensor, v: torch.Tensor, pos: Positions, weighted: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``out`` plus every value term, in order: ``weighted`` holds those computed beside the softmax."""
        taken = 0
        for enc in self.with_hook('value_term'):
            if enc.needs_attn_weights:
                if weighted is None or taken >= len(weighted):
                    raise ValueError(f'{type(enc).__name__} needs the softmax weights, and no term was computed')
                term = weighted[taken]
                taken += 1
            else:
                term = enc.value_term(v, pos)
            # term first: an elementwise op lays its output out like its first operand, so a token-major term
            # (LePE's) makes out token-major and the attention's (B, H, N, d) -> (B, N, C) reshape a view
            out = term + out
        return out


__all__ = ['EncodingStack']
