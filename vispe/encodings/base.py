"""The encoding base class and the hook contract: every hook, its signature and its call point, declared once.

``HOOK_TABLE`` below is the contract; this table restates it (call order within a forward pass):

| hook | signature -> returns | called (by ``vispe.encodings.stack.EncodingStack``) |
|---|---|---|
| ``embed`` | ``(x, pos) -> x`` | once, by the backbone, on the (B, N, D) non-prefix tokens after tokenisation |
| ``attn_input`` | ``(x, pos, i) -> x`` | by block ``i``, on its normalised (B, N_total, D) attention input |
| ``rotate`` | ``(q, k, pos) -> (q, k)`` | in every attention, on (B, H, N_total, d) q and k, before SDPA |
| ``transform_v`` | ``(v, pos) -> v`` | in every attention, on (B, H, N_total, d) v, after ``rotate`` |
| ``logit_bias`` | ``(q, k, pos) -> (B or 1, H, N, N)`` | in every attention; the sum is SDPA's float ``attn_mask`` |
| ``transform_out`` | ``(out, pos) -> out`` | in every attention, on the (B, H, N, d) SDPA output |
| ``value_term`` | ``(v, pos, attn=None, rows=slice(None)) -> term`` | in every attention; added after transform_out |
| ``after_block`` | ``(x, pos) -> x`` | by the backbone after each block named in ``self.blocks``, (B, N_total, D) |

A subclass implements a hook by overriding the base method; ``hooks()`` names the overrides (no ``hasattr``; found
once, when the class is created, so torch.compile reads a class attribute), and
``active_hooks()`` is what the stack calls on an instance (iRPE switches off the hooks its options leave idle).
``value_term`` receives the (B, H, n, N) softmax weights of the query rows ``rows`` in ``attn`` exactly when the
instance's ``needs_attn_weights`` is True (the attention then materialises them instead of fused SDPA, and computes
the term beside them, so before ``transform_out``); otherwise ``attn`` is None. When the N x N bias would not fit
its byte budget (``vispe.attention``), the attention runs a slice of queries at a time: it asks ``logit_bias``
encodings for ``logit_bias_rows(q, k, pos)``, a function of the query rows (the default slices the full bias), and
passes value terms the weights of those rows with ``rows=``.
A ``logit_bias`` encoding with ``has_score_term`` also gives its bias as ``score_term(q, k, pos)``: a function of
FlexAttention's (b, h, q_idx, kv_idx) that reads small tables, which the attention adds inside FlexAttention instead
of materialising the (B, H, N, N) bias, where its kernel rule says so (``vispe.flex``).

``attn_input`` (LaPE's way in, ``lape=True`` on the absolute encodings) is a model-level hook that reaches inside
every block: ``PEBackbone.run_block`` hands block ``i`` the stack's ``attn_input`` for ``i`` as its ``attn_input``
argument (only when some encoding uses it, so the other models' blocks and graphs are unchanged), and the block
applies it to its normalised input just before the attention (``PEBlock``, ``DiTBlock``). A backbone whose blocks
cannot take it leaves it out of its accepted hooks; an encoding that switches it on by an option is then refused
at build, naming the option (``option_hooks``).

Encodings implementing an attention hook are instantiated once per attention layer (their parameters are
per-layer, under ``blocks.i.attn.pe``); the others once per model (under ``pe``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from vispe.checks import once_per_build
from vispe.flex import ScoreTerm
from vispe.positions import Positions
from vispe.registry import ENCODINGS


@dataclass(frozen=True)
class Hook:
    """One entry of the hook contract: what an encoding overriding ``name`` receives and returns, where it is
    called and by whom. ``attention``: called inside each attention layer (the encoding is then per-layer)."""

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
    """Base class of every positional encoding.

    Subclasses override any subset of the hooks and set ``strategies`` when they can be evaluated at
    new resolutions in several ways (the first entry is the default).

    Weight decay: each subclass names in ``no_weight_decay_params`` the parameters its paper and reference code keep
    out of weight decay, and says why in its docstring. That one declaration is all the optimizers read: the
    backbones' ``no_weight_decay()`` (timm's ``create_optimizer_v2``) and vispe's mmengine constructor
    (``vispe.engine.optim``) both derive from it, so no config repeats it as name substrings. 1-D parameters and
    biases take no decay anyway (timm's rule, applied by both), so they need not be declared.
    """

    strategies: ClassVar[tuple[str, ...]] = ()
    #: strategies of ``strategies`` that a sweep runs only when named (``--strategy``): adding one to an encoding then
    #: leaves what its default sweep measures, and the results already archived for it, as they were
    opt_in_strategies: ClassVar[tuple[str, ...]] = ()
    #: the position dimensions it works on: 2 (image token grids), 3 (points, or video token grids (t, h, w));
    #: ``list_encodings(ndim)`` filters on it and backbones refuse the others
    ndims: ClassVar[tuple[int, ...]] = (2,)
    #: made for positions on a token grid (``pos.grid``: an image's (h, w), a video's (t, h, w)): a learned table of
    #: the grid, strategies scaled by the training grid, coordinates centred on the grid. Point clouds have no grid, so
    #: the point transformer refuses these (``list_encodings(ndim=3, grid=False)``); those that read coordinates
    #: alone (rope3d, lff, point_mlp, ...) say False and serve points and video alike
    needs_grid: ClassVar[bool] = True
    #: reads ``pos.cameras``: only backbones that supply cameras (the multi-view transformer) accept it, and there its
    #: ``embed`` hook sees every view's tokens at once with their cameras (an image encoding's sees each view's grid)
    needs_cameras: ClassVar[bool] = False
    #: this instance's value_term needs the softmax weights (the attention then materialises them instead of fused
    #: SDPA). An instance attribute with a class default: an encoding whose options decide it (iRPE on V) sets it
    #: in ``__init__``, and the stack reads the instance's value, never the class's
    needs_attn_weights: bool = False
    #: for ``after_block`` encodings, the indices of the blocks whose output the hook receives (an instance
    #: attribute, set from the encoding's options); the default, none, leaves the hook uncalled
    blocks: tuple[int, ...] = ()
    #: names of the parameters that take no weight decay, relative to the encoding (``fnmatch`` patterns:
    #: ``tables.*``); a name its configuration does not create (rope3d's buffer ``freqs`` in axial mode) is skipped
    no_weight_decay_params: ClassVar[tuple[str, ...]] = ()
    #: holds a learned absolute table of the patch grid, a timm ViT's ``pos_embed`` in vispe form: converting a
    #: timm ViT (``vispe.apply_encoding``) hands the model's table to an encoding with this capability
    #: (``adopt_pos_embed``) and reads it back from one (``pos_embed_table``); ``create_model``'s default encoding for
    #: a timm ViT with a table is the registered encoding that declares it
    learned_pos_embed: ClassVar[bool] = False
    #: a ``logit_bias`` encoding that also gives its bias as a FlexAttention score term (``score_term``), so that the
    #: attention can add it inside the kernel instead of materialising (B, H, N, N) (``vispe.flex``)
    has_score_term: ClassVar[bool] = False
    #: hooks the class implements only under an option (the absolute encodings' ``attn_input`` with ``lape=True``):
    #: a backbone's acceptance check of the class leaves them out, and ``build_backbone_encodings`` refuses a built
    #: instance whose ``active_hooks()`` use one the backbone does not call
    option_hooks: ClassVar[frozenset[str]] = frozenset()
    #: the hooks the class overrides, found once when the class is created (``__init_subclass__``)
    _hooks: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._hooks = frozenset(h for h in HOOKS if getattr(cls, h) is not getattr(Encoding, h))

    @classmethod
    def hooks(cls) -> frozenset[str]:
        """Names of the hooks this class implements (a class attribute, found when the class was created: it is
        asked in every forward, torch.compile included)."""
        return cls._hooks

    def active_hooks(self) -> frozenset[str]:
        """The hooks the backbone calls on this instance: the class's, unless its configuration switches some
        off (iRPE on K only has no value term)."""
        return type(self).hooks()

    @classmethod
    def registry_name(cls) -> str:
        """The name the class is registered under (for messages; its class name when it is not registered)."""
        return next((name for name, c in ENCODINGS.module_dict.items() if c is cls), cls.__name__)

    @classmethod
    def per_layer(cls) -> bool:
        """True when the encoding lives inside each attention layer."""
        return bool(cls.hooks() & ATTENTION_HOOKS)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """This instance's parameters named by ``no_weight_decay_params`` (timm's ``no_weight_decay`` contract:
        names relative to the module); the backbones prefix them with the encoding's place in the model."""
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
        """With ``learned_pos_embed``: take over a timm ViT's (1, n, D) patch table (prefix entries removed),
        resampled to this encoding's grid when n differs."""
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
        """For query chunking: a function ``rows -> logit_bias(q, k, pos)[..., rows, :]``, (B or 1, H, n, N) for n
        query rows. This default computes the whole bias once and slices it (right, but it saves no memory);
        encodings with a large bias override it to compute the rows alone."""
        bias = self.logit_bias(q, k, pos)
        return lambda rows: bias if bias.shape[-2] == 1 else bias[..., rows, :]

    def score_term(self, q: torch.Tensor, k: torch.Tensor, pos: Positions) -> ScoreTerm:
        """With ``has_score_term``: ``logit_bias`` as a function of FlexAttention's (b, h, q_idx, kv_idx) indices,
        reading small tables captured here (per-bucket lookups, coordinates) instead of an N x N tensor; it must
        equal ``logit_bias(q, k, pos)[b, h, q_idx, kv_idx]`` (broadcast over b and h where the bias is)."""
        raise NotImplementedError

    def value_term(
        self, v: torch.Tensor, pos: Positions, attn: torch.Tensor | None = None, rows: slice = slice(None)
    ) -> torch.Tensor:
        """With ``needs_attn_weights``, ``attn`` holds the softmax weights of the query rows ``rows``: (B, H, n, N);
        the term of those rows is returned, (B, H, n, d); without it ``attn`` is None and ``rows`` all of them, and
        an encoding that reads neither still takes both (one signature for every value term)."""
        raise NotImplementedError

    def transform_out(self, out: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def after_block(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        raise NotImplementedError

    def attn_input(self, x: torch.Tensor, pos: Positions, i: int) -> torch.Tensor:
        """Block ``i``'s normalised attention input (B, N_total, D), prefix tokens first -> the same shape."""
        raise NotImplementedError


@once_per_build('owner')
def check_heads(dim: int, num_heads: int, owner: str) -> None:
    """ValueError naming ``owner`` unless ``num_heads`` >= 1 divides the model width ``dim``: the one check of heads
    and width, for every backbone, attention layer and encoding (once per build: ``vispe.checks``)."""
    if isinstance(num_heads, int) and num_heads >= 1 and dim % num_heads == 0:
        return
    divisors = [h for h in range(1, min(dim, 64) + 1) if dim % h == 0]
    raise ValueError(
        f'{owner}: num_heads must be an int >= 1 dividing the model width (embed_dim) {dim}, got num_heads='
        f'{num_heads!r} (each head gets embed_dim / num_heads channels); use num_heads in {divisors} or change '
        'embed_dim'
    )


@once_per_build('owner')
def check_positive(owner: str, **values: float | None) -> None:
    """ValueError naming ``owner`` and the argument when a value is not > 0 (NaN included); None values pass."""
    for name, value in values.items():
        if value is not None and not value > 0:
            raise ValueError(f'{owner} needs {name} > 0, got {name}={value!r}')


_Table = TypeVar('_Table')


class GridTableCache:
    """Tables that depend only on positions (never on parameters), cached per ``Positions.cache_key``: the grid,
    prefix count and device, plus what the caller adds. A table in the input's dtype adds the dtype (ape_sincos);
    rotary tables are float32 whatever the input (the rotation runs in float32), so theirs need not.

    Kept outside the module's state dict so they never land in checkpoints. A table built under
    ``torch.inference_mode`` is an inference tensor, which autograd refuses to save: it is kept apart from the
    others (the mode is part of the key), so an evaluation in inference mode does not break training at its grid.

    Under ``torch.compile`` the cache is neither read nor written: the table is built inside the graph. A lookup
    would make dynamo guard on the dict's contents, and the first call's insertion would then fail that guard and
    recompile the model (once per table, and again whenever an eager call fills the cache). Built in the graph, a
    table is a few pointwise ops on positions per layer (rope_axial: cos and sin of an (N, d/2) product; iRPE: the
    (N, N) bucket ids), which Inductor fuses into the kernels that read it instead of materialising it.
    """

    def __init__(self, max_entries: int = 8) -> None:
        self._tables: dict[Hashable, Any] = {}
        self.max_entries = max_entries

    def get(self, key: Hashable | None, build: Callable[[], _Table]) -> _Table:
        """The table of ``key``: cached, or made by ``build`` (a tensor, or a tuple of them as iRPE's buckets)."""
        if key is None or torch.compiler.is_compiling():
            return build()
        key = (key, torch.is_inference_mode_enabled())
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) >= self.max_entries:
                self._tables.pop(next(iter(self._tables)))
            table = self._tables[key] = build()
        return table
