"""The encoding base class and the hook contract ``HOOK_TABLE`` (signatures and call points, in call order).

Encodings with an attention hook are built once per attention layer (parameters under ``blocks.i.attn.pe``), the
others once per model (``pe``). ``value_term`` gets the softmax weights only when the instance's
``needs_attn_weights``; past the attention's byte budget a bias is asked for by query rows (``logit_bias_rows``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from vispe.flex import ScoreTerm
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@dataclass(frozen=True)
class Hook:
    """One hook of the contract; ``attention``: called inside each attention layer (the encoding is per-layer)."""

    name: str
    signature: str
    call_point: str
    attention: bool


#: the hook contract, in call order within a forward pass; ``EncodingStack`` dispatches exactly these
HOOK_TABLE: dict[str, Hook] = {
    h.name: h
    for h in (
        Hook('embed', '(x, pos) -> x', 'backbone, once: the (B, N, D) non-prefix tokens after tokenisation', False),
        Hook(
            'attn_input',
            '(x, pos, i) -> x',
            "backbone, in every block i: the (B, N_total, D) attention input after the block's pre-norm (and DiT's "
            'modulation), before the attention; the residual stream is left alone',
            False,
        ),
        Hook('rotate', '(q, k, pos) -> (q, k)', 'attention: (B, H, N, d) q and k before SDPA', True),
        Hook('transform_v', '(v, pos) -> v', 'attention: (B, H, N, d) v after rotate', True),
        Hook('logit_bias', '(q, k, pos) -> (B or 1, H, N, N)', "attention: summed into SDPA's attn_mask", True),
        Hook('transform_out', '(out, pos) -> out', 'attention: the (B, H, N, d) SDPA output', True),
        Hook(
            'value_term',
            '(v, pos, attn=None, rows=slice(None)) -> (B, H, n, d)',
            'attention: added to the output after transform_out; with needs_attn_weights computed beside the '
            'softmax, from the weights of the query rows (attn)',
            True,
        ),
        Hook('after_block', '(x, pos) -> x', 'backbone: the (B, N_total, D) output of each block in blocks', False),
    )
}
HOOKS: tuple[str, ...] = tuple(HOOK_TABLE)
ATTENTION_HOOKS: frozenset[str] = frozenset(name for name, hook in HOOK_TABLE.items() if hook.attention)


class Encoding(nn.Module):
    """Base class of every positional encoding: override any subset of the hooks; the class attributes below declare
    its capabilities (docs/encodings/index.md renders them as one table)."""

    #: resolution strategies, the default first
    strategies: ClassVar[tuple[str, ...]] = ()
    #: strategies a sweep runs only when named (``--strategy``), so that adding one leaves the default sweep as it was
    opt_in_strategies: ClassVar[tuple[str, ...]] = ()
    #: the position dimensions it works on: 2 (image token grids), 3 (points, or video token grids (t, h, w));
    #: ``list_encodings(ndim)`` filters on it and backbones refuse the others
    ndims: ClassVar[tuple[int, ...]] = (2,)
    #: needs positions on a token grid (``pos.grid``); False: reads coordinates alone, so serves point clouds too
    #: (``list_encodings(ndim=3, grid=False)``)
    needs_grid: ClassVar[bool] = True
    #: reads ``pos.cameras``: only backbones that supply cameras (the multi-view transformer) accept it; its
    #: ``embed`` sees every view's tokens at once (an image encoding's sees each view's grid)
    needs_cameras: ClassVar[bool] = False
    #: this instance's value_term needs the softmax weights (materialised instead of fused SDPA); set per instance
    #: where options decide it (``attn_weights_option``), and the stack reads the instance's value
    needs_attn_weights: bool = False
    #: ``after_block`` encodings: the blocks whose output the hook receives (per instance); none: the hook is not called
    blocks: tuple[int, ...] = ()
    #: parameters its paper keeps out of weight decay (``fnmatch`` patterns relative to the encoding), read by both
    #: optimizers (timm's through ``no_weight_decay()``, ``vispe.engine.optim``); 1-D parameters take no decay anyway
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ()
    #: why, in a few words (the paper's or reference's recipe, what decay would do)
    weight_decay_note: ClassVar[str] = ''
    #: holds a learned table of the patch grid, a timm ViT's ``pos_embed``: converting a timm ViT hands it over
    #: (``adopt_pos_embed``, ``pos_embed_table``), and the registered encoding declaring it is the default there
    learned_pos_embed: ClassVar[bool] = False
    #: a ``logit_bias`` encoding that also gives its bias as a FlexAttention score term (``score_term``)
    has_score_term: ClassVar[bool] = False
    #: the option under which ``value_term`` needs the softmax weights (iRPE: "'v' in on"); '' for never
    attn_weights_option: ClassVar[str] = ''
    #: hooks the class implements only under an option (``attn_input`` with ``lape=True``): a backbone's check of the
    #: class leaves them out, and ``build_backbone_encodings`` refuses an instance using one the backbone does not call
    option_hooks: ClassVar[frozenset[str]] = frozenset()
    #: the hooks the class overrides, found once when the class is created (``__init_subclass__``)
    _hooks: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._hooks = frozenset(h for h in HOOKS if getattr(cls, h) is not getattr(Encoding, h))

    @classmethod
    def hooks(cls) -> frozenset[str]:
        """Names of the hooks this class overrides."""
        return cls._hooks

    def active_hooks(self) -> frozenset[str]:
        """The hooks called on this instance: the class's, less those its options switch off."""
        return type(self).hooks()

    @classmethod
    def registry_name(cls) -> str:
        """The registered name (the class name when not registered)."""
        return next((name for name, c in ENCODINGS.module_dict.items() if c is cls), cls.__name__)

    @classmethod
    def per_layer(cls) -> bool:
        """True when the encoding lives inside each attention layer."""
        return bool(cls.hooks() & ATTENTION_HOOKS)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """timm's ``no_weight_decay``: the names ``no_weight_decay_params`` matches, relative to the module."""
        patterns = type(self).no_weight_decay_params
        return {n for n, _ in self.named_parameters() if any(fnmatchcase(n, p) for p in patterns)}

    @property
    def strategy(self) -> str:
        return getattr(self, '_strategy', self.strategies[0] if self.strategies else 'none')

    @strategy.setter
    def strategy(self, value: str) -> None:
        if value not in self.strategies:
            raise ValueError(
                f'{type(self).__name__} has no resolution strategy {value!r}; choose one of {list(self.strategies)}'
            )
        self._strategy = value

    def adopt_pos_embed(self, table: torch.Tensor) -> None:
        """With ``learned_pos_embed``: take over a timm ViT's (1, n, D) patch table, resampled when n differs."""
        raise NotImplementedError(f'{type(self).__name__} holds no learned position table (learned_pos_embed)')

    def pos_embed_table(self) -> torch.Tensor:
        """With ``learned_pos_embed``: the (1, h*w, D) patch table it holds (the parameter's data)."""
        raise NotImplementedError(f'{type(self).__name__} holds no learned position table (learned_pos_embed)')

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def transform_v(self, v: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def logit_bias(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def logit_bias_rows(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> Callable[[slice], torch.Tensor]:
        """``rows -> logit_bias(q, k, pos)[..., rows, :]``, (B or 1, H, n, N); this default slices the whole bias."""
        bias = self.logit_bias(q, k, pos)
        return lambda rows: bias if bias.shape[-2] == 1 else bias[..., rows, :]

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> ScoreTerm:
        """With ``has_score_term``: (b, h, q_idx, kv_idx) -> ``logit_bias(q, k, pos)[b, h, q_idx, kv_idx]``."""
        raise NotImplementedError

    def value_term(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor | None = None, rows: slice = slice(None)
    ) -> torch.Tensor:
        """(B, H, n, d) term of the query rows ``rows``; ``attn`` their softmax weights if ``needs_attn_weights``."""
        raise NotImplementedError

    def transform_out(self, out: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def after_block(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def attn_input(self, x: torch.Tensor, pos: Positions, i: int) -> torch.Tensor:
        """Block ``i``'s normalised (B, N_total, D) attention input -> the same shape."""
        raise NotImplementedError


def attention_path(cls: type[Encoding]) -> str:
    """What ``cls`` does to the attention and which kernel runs it, read from the hooks it overrides and its
    declarations (``has_score_term``, ``attn_weights_option``, an own ``logit_bias_rows``)."""
    hooks = cls.hooks()
    if not hooks & ATTENTION_HOOKS:
        return 'unchanged (fused SDPA)'
    steps = [text for hook, text in _PATH_STEPS.items() if hook in hooks]
    if 'logit_bias' in hooks:
        if cls.logit_bias_rows is not Encoding.logit_bias_rows:
            steps[steps.index(_PATH_STEPS['logit_bias'])] += ' (own rows per query chunk)'
        steps.append('SDPA with the mask' + (' or FlexAttention score term' if cls.has_score_term else ''))
    else:
        steps.append('fused SDPA')
    if cls.attn_weights_option:
        steps.append(f'softmax weights materialised when {cls.attn_weights_option}')
    return '; '.join(steps)


#: what each attention hook does, in call order (``attention_path``)
_PATH_STEPS = {
    'rotate': 'q, k rotated',
    'transform_v': 'v transformed',
    'logit_bias': 'float attn_mask',
    'transform_out': 'output transformed',
    'value_term': 'value term added',
}


def check_heads(dim: int, num_heads: int, owner: str) -> None:
    """ValueError naming ``owner`` unless ``num_heads`` >= 1 divides ``dim``."""
    if isinstance(num_heads, int) and num_heads >= 1 and dim % num_heads == 0:
        return
    divisors = [h for h in range(1, min(dim, 64) + 1) if dim % h == 0]
    raise ValueError(
        f'{owner}: num_heads must be an int >= 1 dividing the model width (embed_dim) {dim}, got num_heads='
        f'{num_heads!r} (each head gets embed_dim / num_heads channels); use num_heads in {divisors} or change '
        'embed_dim'
    )


def check_positive(owner: str, **values: float | None) -> None:
    """ValueError naming ``owner`` and the argument when a value is not > 0 (NaN included); None passes."""
    for name, value in values.items():
        if value is not None and not value > 0:
            raise ValueError(f'{owner} needs {name} > 0, got {name}={value!r}')


_Table = TypeVar('_Table')


class GridTableCache:
    """Tables that depend only on positions, cached per ``Positions.cache_key`` (and the inference mode) outside the
    state dict. Under ``torch.compile`` the cache is bypassed: a lookup would make dynamo guard on the dict."""

    def __init__(self, max_entries: int = 8) -> None:
        self._tables: dict[Hashable, Any] = {}
        self.max_entries = max_entries

    def get(self, key: Hashable | None, build: Callable[[], _Table]) -> _Table:
        """The table of ``key``: cached, or made by ``build`` (a tensor or a tuple of them)."""
        if key is None or torch.compiler.is_compiling():
            return build()
        key = (key, torch.is_inference_mode_enabled())
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) >= self.max_entries:
                self._tables.pop(next(iter(self._tables)))
            table = self._tables[key] = build()
        return table
