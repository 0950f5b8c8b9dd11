"""``EncodingStack``: the one place that calls encoding hooks (the contract is ``vispe.encodings.base.HOOK_TABLE``).

Backbones, the attention module and the benchmark all dispatch through it, so a hook is called the same way (same
order, same instance hook set, same ``blocks`` rule, same ``value_term`` signature) wherever an encoding runs.

It is a view, not a module: it holds references to the encodings of the ``nn.ModuleDict`` s it is built from
(a backbone's model-level ``pe``, an attention layer's per-layer ``pe``), which keep owning them, so state-dict
keys (``pe.ape_learned.pos_embed``, ``blocks.0.attn.pe.irpe.tables.k``) do not change. Building one is a tuple of
the dicts' values and every method a Python loop over at most a few encodings asking each instance's cached
``active_hooks()``: negligible per call, and plain Python that FX, torch.export and torch.compile trace through
without a graph break (nothing branches on a tensor). It is rebuilt per forward rather than cached on the module,
so an encoding added to or replaced in a ``pe`` dict is seen at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch import nn

from vispe.encodings.base import HOOK_TABLE, Encoding
from vispe.flex import ScoreTerm
from vispe.positions import Positions


class EncodingStack:
    """The encodings of one or more ``pe`` dicts, in order, with one method per hook phase.

    ``EncodingStack(model.pe)``: the model-level phases ``embed`` and ``after_block``; ``EncodingStack(attn.pe)``:
    the attention phases ``rotate``, ``transform_v``, ``logit_biases`` / ``logit_bias_rows``, ``transform_out`` and
    ``value_terms``. Each phase calls the hook on every encoding whose ``active_hooks()`` holds it, in dict order;
    an empty stack (no dicts: an attention without positions) makes every phase the identity.
    """

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
        """Every ``embed`` hook on the (B, N, D) non-prefix tokens, in order."""
        for enc in self.with_hook('embed'):
            x = enc.embed(x, pos)
        return x

    def after_block(self, i: int, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        """The ``after_block`` hooks of the encodings whose ``blocks`` name block ``i``, on its (B, N_total, D)
        output. ``i`` is a Python int (the backbone's loop index), so traced graphs keep only the hooks that run."""
        for enc in self.with_hook('after_block'):
            if i in enc.blocks:
                x = enc.after_block(x, pos)
        return x

    def attn_input(self, i: int, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        """Every ``attn_input`` hook on block ``i``'s normalised (B, N_total, D) attention input, in order."""
        for enc in self.with_hook('attn_input'):
            x = enc.attn_input(x, pos, i)
        return x

    def attn_input_fn(self, i: int, pos: Positions) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """What block ``i`` takes as its ``attn_input`` argument: ``x -> attn_input(i, x, pos)``, or None when no
        encoding uses the hook (the block then runs as it always did)."""
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
        """Each ``logit_bias`` encoding's (B or 1, H, N, N) bias; the attention sums them into its mask."""
        return [enc.logit_bias(q, k, pos) for enc in self.with_hook('logit_bias')]

    def logit_bias_rows(
        self, q: torch.Tensor, k: torch.Tensor, pos: Positions
    ) -> list[Callable[[slice], torch.Tensor]]:
        """For query chunking: each ``logit_bias`` encoding's function of the query rows (``logit_bias_rows``)."""
        return [enc.logit_bias_rows(q, k, pos) for enc in self.with_hook('logit_bias')]

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> list[ScoreTerm]:
        """Each ``logit_bias`` encoding's FlexAttention score term (``Encoding.score_term``), in order."""
        return [enc.score_term(q, k, pos) for enc in self.with_hook('logit_bias')]

    def weighted(self) -> list[Encoding]:
        """The value-term encodings that need the softmax weights (``needs_attn_weights`` of the instance)."""
        return [enc for enc in self.with_hook('value_term') if enc.needs_attn_weights]

    def weighted_terms(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor, rows: slice = slice(None)
    ) -> list[torch.Tensor]:
        """The ``weighted()`` encodings' value terms of the query rows ``rows``, from their (B, H, n, N) softmax
        weights ``attn``: (B, H, n, d) each, in order."""
        return [enc.value_term(v, pos, attn, rows) for enc in self.weighted()]

    def transform_out(self, out: torch.Tensor, pos: Positions) -> torch.Tensor:
        for enc in self.with_hook('transform_out'):
            out = enc.transform_out(out, pos)
        return out

    def value_terms(
        self, out: torch.Tensor, v: torch.Tensor, pos: Positions, weighted: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``out`` plus every value term, in order: those needing the weights from ``weighted`` (the
        ``weighted_terms`` the attention computed beside the softmax, in ``weighted()`` order), the others from v."""
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
