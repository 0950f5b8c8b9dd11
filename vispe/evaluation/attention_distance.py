"""Mean attention distance of a trained checkpoint (the ViT paper's figure): for each layer and head, how far in pixels
a patch's attention reaches, at several image sizes.

For a patch query i, its distance is sum_j a_ij ||p_i - p_j||, with p the patch centres in pixels and a the softmax
weights the model's own attention computes: rotations and logit biases of its encodings applied, as its eager path
does (FlexAttention computes the same weights without materialising them). Prefix tokens (cls, registers) have no
position in the image: only patch queries count, and each one's weights over the patch keys are renormalised to sum to
one; the share of its attention that went to prefix tokens is reported beside (``prefix_attention``). A layer and
head's value is the mean over the patch queries of the images used.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch

from vispe.engine.config import flat_config
from vispe.evaluation import figures, report
from vispe.evaluation.trained_model import (
    Resolution,
    check_resolutions,
    check_strategies,
    encoding_label,
    load_model,
    model_patch_size,
    resize_setting,
    resolution_label,
    set_strategy,
    settings_loader,
    trained_config,
    training_record,
)
from vispe.positions import Positions


def attention_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every vispe attention layer of ``model`` in forward order: the modules with vispe
    Attention's ``attention_weights``, ``qkv`` and encoding ``stack``."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if callable(getattr(m, 'attention_weights', None)) and hasattr(m, 'qkv') and hasattr(m, 'stack')
    ]


def softmax_weights(
    attn: Any,
    x: torch.Tensor,
    pos: Positions | None = None,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """The (B, H, N, N) softmax weights that vispe's ``Attention`` module ``attn`` computes on tokens ``x`` (B, N, C):
    its qkv and q/k norms, its encodings' ``rotate`` and ``logit_bias`` hooks, then its ``attention_weights``.
    ValueError for a caller's mask, a causal call or a mixed-size batch (one image size per batch only)."""
    if attn_mask is not None or is_causal or (pos is not None and pos.layout is not None):
        raise ValueError(
            'attention distance reads unmasked attention over one image size per batch; this call has an attn_mask, '
            'is_causal or a mixed-size layout: evaluate a (B, C, H, W) batch of one size'
        )
    B, N, _ = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    mask = None
    if pos is not None:
        stack = attn.stack
        q, k = stack.rotate(q, k, pos)
        for bias in stack.logit_biases(q, k, pos) if stack.with_hook('logit_bias') else []:
            mask = bias.to(q.dtype) if mask is None else mask + bias.to(q.dtype)
    return attn.attention_weights(q, k, mask)


def patch_pixels(grid: Sequence[int], patch: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor:
    """(h * w, 2) float: the centre of each patch of an h x w grid in pixels (row, col), row-major like the tokens."""
    (h, w), (ph, pw) = grid, patch
    rows, cols = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing='ij')
    return torch.stack([(rows.flatten() + 0.5) * ph, (cols.flatten() + 0.5) * pw], dim=-1).double()


def grid_diameter(grid: Sequence[int], patch: Sequence[int]) -> float:
    """The largest distance between two patch centres of the grid, in pixels: the bound of any attention distance."""
    return math.hypot((grid[0] - 1) * patch[0], (grid[1] - 1) * patch[1])


def uniform_distance(grid: Sequence[int], patch: Sequence[int]) -> float:
    """The attention distance of attention spread evenly over the patches: the mean pairwise distance (pixels)."""
    points = patch_pixels(grid, patch)
    return float(torch.cdist(points, points).mean())


def image_distances(
    weights: torch.Tensor, grid: Sequence[int], patch: Sequence[int], num_prefix: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and head, from (B, H, N, N) softmax weights over ``num_prefix`` prefix tokens then an h x w grid:
    (the mean attention distance of the patch queries in pixels, (B, H); their mean attention share on prefix tokens,
    (B, H)). Patch weights are renormalised over the patch keys (module docstring); ValueError when N does not fit."""
    B, H, N, M = weights.shape
    patches = int(grid[0]) * int(grid[1])
    if N != M or N != num_prefix + patches:
        raise ValueError(
            f'attention weights over {N} x {M} tokens do not fit {num_prefix} prefix tokens and a {grid[0]}x{grid[1]} '
            'grid: distances need one image size per batch'
        )
    a = weights[:, :, num_prefix:, :].double()  # patch queries
    prefix_share = a[..., :num_prefix].sum(-1)  # (B, H, P)
    a = a[..., num_prefix:]
    a = a / a.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
    points = patch_pixels(grid, patch, weights.device)
    per_query = (a * torch.cdist(points, points)).sum(-1)  # (B, H, P)
    return per_query.mean(-1), prefix_share.mean(-1)


@contextlib.contextmanager
def recorded_distances(
    model: torch.nn.Module, patch: Sequence[int]
) -> Iterator[dict[str, list[tuple[torch.Tensor, torch.Tensor]]]]:
    """Within the block, every forward of a vispe attention layer of ``model`` appends to ``records[layer name]`` its
    ``image_distances`` (recomputed by ``softmax_weights`` from the layer's own inputs, without gradient); the
    model's outputs are unchanged. Yields ``records``, keyed by ``attention_layers`` name in forward order."""
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f'{type(model).__name__} has no vispe attention layer to read attention weights from')
    records: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {name: [] for name, _ in layers}

    def hook_for(name: str, module: torch.nn.Module):
        signature = inspect.signature(module.forward)

        def hook(mod, args, kwargs):
            call = signature.bind(*args, **kwargs)
            call.apply_defaults()
            x, pos = call.arguments['x'], call.arguments.get('pos')
            if pos is None or pos.grid is None or len(pos.grid) != 2:
                raise ValueError(f'{name}: attention distance needs the tokens of a 2D grid of patches (positions)')
            with torch.no_grad():
                weights = softmax_weights(mod, x, pos, call.arguments.get('attn_mask'), call.arguments['is_causal'])
                records[name].append(image_distances(weights, pos.grid, patch, pos.num_prefix))

        return hook

    handles = [m.register_forward_pre_hook(hook_for(name, m), with_kwargs=True) for name, m in layers]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def sample_batch(cfg, res: Resolution, num_images: int, resize: str | None = None) -> dict[str, Any]:
    """The first ``num_images`` samples of the config's test set at ``res``, as one collated batch: a procedural set
    renders that size, a set of image files is resized to it (``resize``: 'crop', 'pad' or 'stretch')."""
    loader = settings_loader(cfg, dict(image_size=res, **resize_setting(cfg, resize)), num_images)
    return next(iter(loader))


def attention_distances(
    cfg,
    checkpoint: str,
    sizes: Sequence[Resolution],
    num_images: int = 8,
    device: str = 'cpu',
    strategy: str | None = None,
    resize: str | None = None,
) -> dict[str, Any]:
    """The mean attention distance per layer and head of ``checkpoint`` on ``num_images`` test images at each of
    ``sizes`` (pixels: 32 or (H, W)), under ``strategy`` (None: the encodings' own). Returns a JSON-able dict::

        {'config', 'checkpoint', 'encoding', 'strategy', 'patch_size': [ph, pw], 'layers': [names],
         'description', 'train_resolution' (or 'train_sizes'), 'trained_config' (when recorded),
         'sizes': {label: {'resolution', 'grid': [h, w], 'images', 'max_distance', 'uniform_distance',
                           'distances': [[px per head] per layer], 'prefix_attention': [[share per head] per layer]}}}

    ValueError for a size the patch does not divide or a strategy the encodings do not support."""
    if int(num_images) < 1:
        raise ValueError(f'num_images must be at least 1, got {num_images}')
    model, meta = load_model(cfg, checkpoint, device)
    check_resolutions(model, sizes)
    if strategy is not None:
        check_strategies(model, [strategy])
        set_strategy(model, strategy)
    patch = model_patch_size(model)
    record = training_record(cfg, meta)
    recorded = trained_config(meta)
    resolved = {'resolved_config': json.loads(json.dumps(flat_config(cfg.to_dict()), default=repr))}
    result: dict[str, Any] = {
        'config': cfg.filename,
        'checkpoint': checkpoint,
        'encoding': encoding_label(model, meta),
        'strategy': strategy or 'default',
        'patch_size': list(patch),
        'layers': [name for name, _ in attention_layers(model)],
        'description': report.describe({**record, **(recorded or resolved)}),
        **record,
        **recorded,
        'sizes': {},
    }
    for res in sizes:
        batch = sample_batch(cfg, res, num_images, resize)
        with recorded_distances(model, patch) as records, torch.no_grad():
            cast(Any, model).test_step(batch)
        h, w = (res, res) if isinstance(res, int) else res
        grid = (h // patch[0], w // patch[1])
        per_layer = [
            (torch.cat([d for d, _ in parts]).mean(0), torch.cat([s for _, s in parts]).mean(0))
            for parts in records.values()
        ]
        result['sizes'][resolution_label(res)] = {
            'resolution': res if isinstance(res, int) else list(res),
            'grid': list(grid),
            'images': int(sum(d.shape[0] for d, _ in next(iter(records.values())))),
            'max_distance': grid_diameter(grid, patch),
            'uniform_distance': uniform_distance(grid, patch),
            'distances': [d.tolist() for d, _ in per_layer],
            'prefix_attention': [s.tolist() for _, s in per_layer],
        }
    return result


def plot_attention_distances(result: dict[str, Any], path: str, title: str = '') -> str:
    """The ViT paper's figure of an ``attention_distances`` result, saved as PNG at ``path``: mean attention distance
    against layer, one dot per head and a line through the heads' mean, one colour and marker per image size; left in
    pixels (each size's uniform-attention distance dashed), right as a fraction of that uniform distance, where sizes
    compare (1: attention spread evenly over the image; below: local)."""
    import textwrap

    sizes = result['sizes']
    if not sizes:
        raise ValueError('the result holds no image size to plot; compute attention_distances with sizes')
    styles = figures.line_styles(len(sizes))
    layers = max(len(entry['distances']) for entry in sizes.values())
    title = title or (
        f'mean attention distance: {result.get("encoding", "")} ({result.get("strategy", "default")}), '
        f'patch {"x".join(map(str, result.get("patch_size", [])))}\n{result.get("description", "")}'
    )
    title = '\n'.join(textwrap.fill(line, figures.TITLE_WIDTH) for line in title.strip().splitlines())
    width = max(9.0, 1.0 * layers + 5.0)
    fig, (pixels, relative) = figures.plt().subplots(
        1, 2, figsize=(width, 4.2 + 0.15 * title.count('\n')), dpi=120, sharex=True
    )
    step = 0.6 / len(sizes)
    for i, ((label, entry), style) in enumerate(zip(sizes.items(), styles)):
        offset = (i - (len(sizes) - 1) / 2) * step
        grid = 'x'.join(map(str, entry['grid']))
        uniform = entry['uniform_distance']
        for ax, scale in ((pixels, 1.0), (relative, 1.0 / uniform)):
            draw_heads(ax, entry['distances'], offset, scale, style, f'{label} px ({grid} grid)')
        pixels.axhline(uniform, color=style['color'], linestyle='--', linewidth=0.9, gid=figures.REFERENCE)
    relative.axhline(1.0, color='grey', linestyle='--', linewidth=0.9, label='uniform attention', gid=figures.REFERENCE)
    labels = ('mean attention distance (pixels)', 'distance / uniform attention distance')
    for ax, ylabel in zip((pixels, relative), labels):
        ax.set_xticks(range(layers), [str(i + 1) for i in range(layers)])
        ax.set_xlim(-0.5, layers - 0.5)
        ax.set_ylim(bottom=0)
        ax.set_xlabel('layer (dots: heads; line: their mean)')
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    pixels.set_title('in pixels (dashed: uniform attention)', fontsize=8)
    relative.set_title('relative to uniform attention at that size', fontsize=8)
    fig.suptitle(title, fontsize=8)
    figures.legend_outside(relative)
    return figures.save_figure(fig, path)


def draw_heads(ax, distances: list[list[float]], offset: float, scale: float, style: dict[str, Any], label: str):
    """A dot per (layer, head) of ``distances`` times ``scale`` at x = layer + ``offset``, and the heads' mean line."""
    color, marker = style['color'], style['marker']
    for layer, heads in enumerate(distances):
        ys = [d * scale for d in heads]
        ax.scatter([layer + offset] * len(ys), ys, color=color, marker=marker, s=22, alpha=0.8, linewidths=0)
    means = [scale * sum(heads) / len(heads) for heads in distances]
    xs = [layer + offset for layer in range(len(means))]
    ax.plot(xs, means, color=color, marker=marker, markersize=4, linewidth=1.2, label=label)


__all__ = [
    'attention_distances',
    'attention_layers',
    'grid_diameter',
    'image_distances',
    'patch_pixels',
    'plot_attention_distances',
    'recorded_distances',
    'softmax_weights',
    'sample_batch',
    'uniform_distance',
]
