"""What an encoding does to positions, as maps over the token grid: position similarity, relative kernels and reach.

Three kinds of map, each for a query token and every key token of an h x w grid:

- ``similarity``: cosine similarity of the vectors an additive encoding (``embed``, ``attn_input``) adds at the query
  and at each key (the ViT paper's figure).
- ``kernel``: the attention logit between query and key when every token carries the same content vector ``c``, so
  that the logits differ only by position: tokens ``x = c`` plus the additive encodings' vectors, q and k split into
  heads (no projection for an encoding built here; the layer's own ``qkv`` and the block's pre-norm for a trained
  layer), rotated by the ``rotate`` encodings, ``q k^T / sqrt(d)`` plus the ``logit_bias`` rows, as
  ``vispe.attention.Attention`` computes them before the softmax; the mean over heads or over chosen heads.
- ``reach``: for encodings that change neither the tokens' vectors nor the logits (``value_term`` or ``after_block``
  alone: LePE, PEG), how strongly each key token's input reaches the query's output through the encoding: the norm
  over channels of the gradient of a random projection of the query's output.

Encodings that read cameras are drawn on ``camera_maps.RIG``, two views of one camera looking at a plane: the query
in view 1, the keys over both views, the map's views side by side.

Queries are given as fractions of the training grid, rounded down to a training cell and scaled with the grid, so a
query sits at matching positions across sizes that are multiples of the training grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vispe.encodings.base import Encoding
from vispe.encodings.build import build_encoding, encoding_class, normalize_spec, spec_text
from vispe.encodings.stack import EncodingStack
from vispe.evaluation.camera_maps import (
    RIG,
    ViewStack,
    camera_positions,
    reads_cameras,
    reads_rig,
    side_by_side,
    why_not_on_rig,
)
from vispe.evaluation.trained_model import available_strategies, set_strategy
from vispe.positions import Positions, grid_positions, video_positions

#: the width and heads of the probe an encoding is built into (head width 24: every rotary split divides it)
PROBE_DIM, PROBE_HEADS = 96, 4
#: default queries, as (row, column) fractions of the training grid: the centre and a quarter in
QUERIES: tuple[tuple[float, float], ...] = ((0.5, 0.5), (0.25, 0.25))
KINDS = ('auto', 'similarity', 'kernel', 'reach')
ADDITIVE = frozenset({'embed', 'attn_input'})
INSIDE = frozenset({'rotate', 'logit_bias'})
Size = int | tuple[int, int]


def hw(size: Size | Sequence[int]) -> tuple[int, int]:
    """``size`` as (rows, columns) of tokens."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def why_not_drawn(spec: str) -> str | None:
    """Why ``spec``'s encodings cannot be drawn, or None when they can: camera encodings are drawn on the default rig
    (``camera_maps.RIG``), unless combined with an encoding views do not serve."""
    return why_not_on_rig(spec) if reads_cameras(spec) else None


def build_probe(spec: str, grid: Size, seed: int = 0) -> nn.ModuleDict:
    """The encodings of ``spec`` (a name, 'name:key=value' or 'a+b') built as a one-block backbone builds them: width
    ``PROBE_DIM``, ``PROBE_HEADS`` heads, training grid ``grid``, parameters drawn from ``seed``. ValueError for an
    unknown name (listing the closest) or a camera encoding combined with one views do not serve (``why_not_drawn``);
    camera encodings get the rig's patch size."""
    why = why_not_drawn(spec)
    if why:
        raise ValueError(f'{spec}: {why}')
    cfgs = normalize_spec(spec)
    ndim = 2 if all(2 in encoding_class(c['type']).ndims for c in cfgs) else 3
    h, w = hw(grid)
    train = (h, w) if ndim == 2 else (1, h, w)
    torch.manual_seed(seed)
    context = dict(dim=PROBE_DIM, num_heads=PROBE_HEADS, ndim=ndim, grid_size=train, depth=1, layer_index=0)
    if reads_cameras(spec):
        context['patch_size'] = RIG.patch
    return nn.ModuleDict({c['type']: build_encoding(c, **context) for c in cfgs}).eval()


def probe_positions(encodings: nn.Module, size: Size) -> Positions:
    """Positions of an h x w token grid for ``encodings``: a 2-D grid, a one-frame video grid for encodings of video
    grids, points (row, column, 0) for encodings of 3-D coordinates alone, or the views of ``camera_maps.RIG`` for
    encodings that read cameras."""
    h, w = hw(size)
    if reads_rig(encodings):
        return camera_positions((h, w))
    classes = [type(e) for e in encodings.modules() if isinstance(e, Encoding)]
    if all(2 in c.ndims for c in classes):
        return grid_positions(h, w)
    if all(c.needs_grid for c in classes):
        return video_positions(1, h, w)
    flat = grid_positions(h, w).coords
    return Positions(torch.cat([flat, torch.zeros(len(flat), 1)], dim=1))


def auto_kind(encodings: nn.ModuleDict) -> str:
    """The map that shows what ``encodings`` do: kernel when one acts inside attention (rotate, logit_bias), else
    similarity when one adds to the tokens, else reach."""
    hooks = frozenset().union(*(e.active_hooks() for e in encodings.values() if isinstance(e, Encoding)))
    if hooks & INSIDE:
        return 'kernel'
    return 'similarity' if hooks & ADDITIVE else 'reach'


def query_cells(grid: Size, size: Size, queries: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """Each query fraction as a cell of the training ``grid``, scaled to ``size`` (row, column), clamped inside."""
    (th, tw), (h, w) = hw(grid), hw(size)
    out = []
    for fr, fc in queries:
        r, c = min(int(fr * th), th - 1), min(int(fc * tw), tw - 1)
        out.append((min(r * h // th, h - 1), min(c * w // tw, w - 1)))
    return out


def tokens(stack: EncodingStack, pos: Positions, content: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """(1, N, D): ``content`` at every token plus the additive encodings (``embed``, then block ``layer``'s
    ``attn_input``)."""
    x = content.expand(1, pos.num_tokens, -1).clone()
    return stack.attn_input(layer, stack.embed(x, pos), pos)


@torch.no_grad()
def similarity(stack: EncodingStack, pos: Positions, rows: Sequence[int], dim: int) -> torch.Tensor:
    """(R, N) cosine similarity of the additive encodings' ``dim``-wide vector at each query row with every token's."""
    table = tokens(stack, pos, torch.zeros(dim))[0]
    table = nn.functional.normalize(table.double(), dim=-1)
    return table[list(rows)] @ table.T


@torch.no_grad()
def kernel(
    stack: EncodingStack,
    pos: Positions,
    rows: Sequence[int],
    content: torch.Tensor,
    num_heads: int,
    qkv: nn.Module | None = None,
    norm: nn.Module | None = None,
    layer: int = 0,
) -> torch.Tensor:
    """(H, R, N) pre-softmax logits of each query row over every token, every token carrying ``content`` (D,).

    q and k are the tokens split into ``num_heads`` heads, or ``qkv``'s after ``norm`` when given (a trained layer)."""
    x = tokens(stack, pos, content, layer)
    if norm is not None:
        x = norm(x)
    n, dim = x.shape[1], x.shape[2]
    head = dim // num_heads
    if qkv is not None:
        q, k, _ = qkv(x).reshape(1, n, 3, num_heads, head).permute(2, 0, 3, 1, 4).unbind(0)
    else:
        q = k = x.reshape(1, n, num_heads, head).transpose(1, 2)
    q, k = stack.rotate(q, k, pos)
    index = torch.tensor(list(rows))
    logits = (q[:, :, index] * head**-0.5) @ k.transpose(-2, -1)
    for bias_rows in stack.logit_bias_rows(q, k, pos):
        logits = logits + torch.stack([bias_rows(slice(r, r + 1))[..., 0, :].expand(1, num_heads, n) for r in rows], 2)
    return logits[0].double()


def reach(
    stack: EncodingStack, pos: Positions, rows: Sequence[int], dim: int, num_heads: int, seed: int = 0
) -> torch.Tensor:
    """(R, N) how strongly each token's input reaches each query row's output through the value terms and
    ``after_block`` hooks: the channel norm of the gradient of a random projection of the query's added output."""
    gen = torch.Generator().manual_seed(seed)
    n = pos.num_tokens
    out = []
    for r in rows:
        v = torch.randn(1, num_heads, n, dim // num_heads, generator=gen).requires_grad_(True)
        x = torch.randn(1, n, dim, generator=gen).requires_grad_(True)
        added = stack.value_terms(torch.zeros_like(v), v, pos).transpose(1, 2).reshape(1, n, dim)
        for enc in stack.with_hook('after_block'):
            added = added + enc.after_block(x, pos) - x
        u = torch.randn(dim, generator=gen)
        grads = torch.autograd.grad((added[0, r] * u).sum(), (v, x), allow_unused=True)
        total = torch.zeros(n, dtype=torch.float64)
        if grads[0] is not None:
            total += grads[0][0].transpose(0, 1).reshape(n, -1).double().pow(2).sum(-1)
        if grads[1] is not None:
            total += grads[1][0].double().pow(2).sum(-1)
        out.append(total.sqrt())
    return torch.stack(out)


def strategies_of(encodings: nn.Module, wanted: Sequence[str] | None) -> tuple[list[str], str]:
    """(the strategies of ``wanted`` the encodings take, a note on those left out); their own (as built or trained)
    when ``wanted`` is None or names none they take."""
    takes = available_strategies(encodings, opt_in=True)
    if takes == ['default']:
        return ['default'], ''
    current = [e.strategy for e in encodings.modules() if isinstance(e, Encoding) and type(e).strategies]
    if wanted is None:
        return [current[0]], ''
    chosen = [s for s in wanted if s in takes]
    left = [s for s in wanted if s not in takes]
    note = f'takes none of {left} (it takes {takes})' if left else ''
    if not chosen:
        chosen = [current[0]]
        note += f'; drawn with its default {chosen[0]}'
    return chosen, note


def draw(
    stack: EncodingStack,
    pos: Positions,
    kind: str,
    cells: Sequence[tuple[int, int]],
    width: int,
    content: torch.Tensor,
    num_heads: int,
    heads: Sequence[int] | None = None,
    qkv: nn.Module | None = None,
    norm: nn.Module | None = None,
    layer: int = 0,
) -> list[list[list[float]]]:
    """One (h, w) map per query cell of ``kind`` ('similarity', 'kernel', 'reach'), as nested lists."""
    rows = [r * width + c for r, c in cells]
    if kind == 'similarity':
        values = similarity(stack, pos, rows, content.numel())
    elif kind == 'kernel':
        logits = kernel(stack, pos, rows, content, num_heads, qkv, norm, layer)
        values = logits[list(heads)].mean(0) if heads else logits.mean(0)
    else:
        values = reach(stack, pos, rows, content.numel(), num_heads)
    return [v.reshape(-1, width).tolist() for v in values]


def encoding_maps(
    specs: Sequence[str],
    grid: Size = 14,
    sizes: Sequence[Size] | None = None,
    strategies: Sequence[str] | None = None,
    queries: Sequence[Sequence[float]] = QUERIES,
    kind: str = 'auto',
    heads: Sequence[int] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Maps of each encoding spec at its initialisation (``seed``), at the training ``grid`` and each of ``sizes``
    under each of ``strategies`` it takes (None: its own; one it does not take is noted and left out).

    Returns a JSON-able dict: ``grid``, ``sizes``, ``queries``, ``maps`` (one entry per encoding, strategy, size and
    query: ``encoding``, ``kind``, ``strategy``, ``size``, ``query`` (row, column) and ``values`` (rows of floats)),
    ``notes`` and ``skipped`` (``encoding`` and ``reason``, for a spec ``why_not_drawn`` refuses). A camera
    encoding's maps are (h, 2 w), view 1 then view 2, with ``views`` (2) and ``rig`` (the rig in words). ValueError
    for an unknown encoding or kind."""
    if kind not in KINDS:
        raise ValueError(f'unknown map kind {kind!r}; choose one of {list(KINDS)}')
    sizes = list(sizes or [grid])
    result: dict[str, Any] = dict(
        grid=list(hw(grid)), sizes=[list(hw(s)) for s in sizes], queries=[list(q) for q in queries]
    )
    result.update(maps=[], notes=[], skipped=[])
    for spec in specs:
        why = why_not_drawn(spec)
        if why:
            result['skipped'].append({'encoding': spec, 'reason': why})
            continue
        probe = build_probe(spec, grid, seed)
        label = spec_text(spec)
        chosen, note = strategies_of(probe, strategies)
        if note:
            result['notes'].append(f'{label}: {note}')
        what = auto_kind(probe) if kind == 'auto' else kind
        content = torch.randn(PROBE_DIM, generator=torch.Generator().manual_seed(seed + 1))
        for strategy in chosen:
            if strategy != 'default':
                set_strategy(probe, strategy)
            entry: dict[str, Any] = dict(encoding=label, kind=what, strategy=strategy, layer=None)
            stack = EncodingStack(probe)
            if reads_rig(probe):
                entry.update(views=RIG.num_views, rig=RIG.text())
                stack = ViewStack(probe)
            add_maps(result, entry, stack, probe, grid, sizes, queries, content, PROBE_HEADS, heads)
    return result


def add_maps(
    result: dict[str, Any],
    entry: dict[str, Any],
    stack: EncodingStack,
    encodings: nn.Module,
    grid: Size,
    sizes: Sequence[Size],
    queries: Sequence[Sequence[float]],
    content: torch.Tensor,
    num_heads: int,
    heads: Sequence[int] | None = None,
    **layer: Any,
) -> None:
    """Append to ``result['maps']`` one map of ``entry``'s kind per size and query (``layer``: ``draw``'s qkv, norm
    and layer); a note when a map is flat (the same value at every key, as a zero-initialised table gives)."""
    for size in sizes:
        cells = query_cells(grid, size, queries)
        pos = probe_positions(encodings, size)
        maps = draw(stack, pos, entry['kind'], cells, hw(size)[1], content, num_heads, heads, **layer)
        if pos.cameras is not None:
            maps = side_by_side(maps, pos.cameras.num_views)
        for cell, values in zip(cells, maps):
            result['maps'].append(dict(entry, size=list(hw(size)), query=list(cell), values=values))
            kept = finite(values)
            where = 'at initialisation' if entry['layer'] is None else f'in layer {entry["layer"]}'
            flat = f'{entry["encoding"]}: its {entry["kind"]} is flat (the same at every key) {where}'
            if kept and max(kept) - min(kept) <= 1e-9 * max(1.0, abs(max(kept))) and flat not in result['notes']:
                result['notes'].append(flat)


def model_maps(
    model: nn.Module,
    label: str,
    grid: Size,
    sizes: Sequence[Size] | None = None,
    strategies: Sequence[str] | None = None,
    queries: Sequence[Sequence[float]] = QUERIES,
    heads: Sequence[int] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """``encoding_maps`` of a trained model's encodings as learned: the similarity of its model-level additive
    encodings, and each attention layer's kernel through the layer's own ``qkv`` (after its block's ``norm1`` where
    the block has one), the model-level encodings added to the content; ``layer`` names the layer in each map."""
    sizes = list(sizes or [grid])
    result: dict[str, Any] = dict(
        grid=list(hw(grid)), sizes=[list(hw(s)) for s in sizes], queries=[list(q) for q in queries]
    )
    result.update(maps=[], notes=[], skipped=[])
    layers: list[Any] = [
        m for m in model.modules() if isinstance(getattr(m, 'pe', None), nn.ModuleDict) and hasattr(m, 'qkv')
    ]
    inside = {id(e) for m in layers for e in m.pe.values()}
    top = nn.ModuleDict(
        {type(e).registry_name(): e for e in model.modules() if isinstance(e, Encoding) and id(e) not in inside}
    )
    norms: dict[int, Any] = {id(b.attn): b.norm1 for b in model.modules() if hasattr(b, 'attn') and hasattr(b, 'norm1')}
    chosen, note = strategies_of(model, strategies)
    if note:
        result['notes'].append(f'{label}: {note}')
    dim = int(next((m.qkv.in_features for m in layers), PROBE_DIM))
    content = torch.randn(dim, generator=torch.Generator().manual_seed(seed + 1))
    additive = any(e.active_hooks() & ADDITIVE for e in top.values() if isinstance(e, Encoding))
    for strategy in chosen:
        if strategy != 'default':
            set_strategy(model, strategy)
        base: dict[str, Any] = dict(encoding=label, strategy=strategy)
        if additive:
            entry = dict(base, kind='similarity', layer=None)
            add_maps(result, entry, EncodingStack(top), top, grid, sizes, queries, content, 1, heads)
        for i, attn in enumerate(layers):
            stack, both = EncodingStack(top, attn.pe), nn.ModuleDict({**top, **attn.pe})
            layer: dict[str, Any] = dict(qkv=attn.qkv, norm=norms.get(id(attn)), layer=i)
            entry = dict(base, kind='kernel', layer=i)
            add_maps(result, entry, stack, both, grid, sizes, queries, content, int(attn.num_heads), heads, **layer)
    return result


def finite(values: Sequence[Sequence[float]]) -> list[float]:
    """The finite entries of a map (a logit bias may mask keys with -inf)."""
    return [v for row in values for v in row if math.isfinite(v)]


__all__ = ['KINDS', 'QUERIES', 'build_probe', 'draw', 'encoding_maps', 'kernel', 'model_maps', 'reach', 'similarity']
