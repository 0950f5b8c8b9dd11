"""The encoding pages' pictures, drawn by vispe's own show-encoding functions (``vispe.evaluation.encoding_maps``):
each family's maps at its initialisation (the trained ones from the model zoo where a map starts flat or random),
and the relative kernels that "Choosing an encoding" sets beside the leaderboard.

    .venv/bin/python workbench/encoding_figures.py [NAME ...]    (make docs-figures: all of them)

FIGURES names each picture, the page that shows it and what it draws; tests/test_encoding_figures.py checks that
every registered encoding that can be drawn is in a family's picture and that every page shows its pictures.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Figure:
    """One picture: ``encodings`` at their initialisation, or, with ``checkpoint`` (a model zoo folder), that model's
    ``encodings`` as trained."""

    path: str  # under docs/
    page: str  # the docs page that shows it, under docs/
    title: str
    encodings: tuple[str, ...] = ()
    checkpoint: str = ''
    grid: int = 14
    sizes: tuple[int, ...] = (14, 28)
    strategies: tuple[str, ...] | None = None
    queries: tuple[tuple[float, float], ...] = ((0.5, 0.5), (0.25, 0.25))


FIGURES = {
    'absolute': Figure(
        'encodings/maps_absolute.png',
        'encodings/absolute.md',
        'Position similarity at initialisation (cosine; trained grid 14x14, and 28x28 under each own strategy)',
        ('ape_sincos', 'loope', 'lff', 'ape_learned', 'ape_learned:lape=true'),
    ),
    'absolute_trained': Figure(
        'encodings/maps_ape_learned_trained.png',
        'encodings/absolute.md',
        'ape_learned as trained (model zoo, shapes2d position, 8x8 grid): similarity at 1x and 2x (bicubic)',
        ('ape_learned',),
        checkpoint='vit_tiny_ape_learned_shapes2d_position',
        grid=8,
        sizes=(8, 16),
    ),
    'lff_trained': Figure(
        'encodings/maps_lff_trained.png',
        'encodings/absolute.md',
        'lff as trained (model zoo, shapes2d position, 8x8 grid): similarity at 1x and 2x',
        ('lff',),
        checkpoint='vit_tiny_lff_shapes2d_position',
        grid=8,
        sizes=(8, 16),
    ),
    'rotary': Figure(
        'encodings/maps_rotary.png',
        'encodings/rotary.md',
        'Relative kernels at initialisation (centred logit for one content vector; 14x14, and 28x28 as built)',
        (
            'rope_axial',
            'rope_mixed',
            'rope_dinov3',
            'harope',
            'comrope_ap',
            'comrope_ld',
            'liere',
            'string_cayley',
            'string_circulant',
        ),  # fmt: skip
    ),
    'video': Figure(
        'encodings/maps_video.png',
        'encodings/rotary.md',
        'Video rotary encodings on one frame (t = 0): relative kernels at initialisation, 14x14 and 28x28',
        ('mrope', 'videorope', 'vrope'),
    ),
    'bias': Figure(
        'encodings/maps_bias.png',
        'encodings/relative-bias.md',
        "alibi2d's kernel at initialisation (its slopes are fixed), 14x14 and 28x28",
        ('alibi2d',),
    ),
    'bias_trained': Figure(
        'encodings/maps_irpe_trained.png',
        'encodings/relative-bias.md',
        "irpe as trained (model zoo, shapes2d position, 8x8 grid; its tables start at zero): each layer's kernel",
        ('irpe',),
        checkpoint='vit_tiny_irpe_shapes2d_position',
        grid=8,
        sizes=(8, 16),
    ),
    'conditional': Figure(
        'encodings/maps_conditional.png',
        'encodings/conditional.md',
        "Reach at initialisation: how strongly each token's input reaches the query's output through the encoding",
        ('peg', 'lepe'),
    ),
    'points': Figure(
        'encodings/maps_points.png',
        'encodings/camera-3d.md',
        'Point encodings on a grid of points (z = 0) at initialisation: similarity (point_mlp), kernel (rope3d)',
        ('point_mlp', 'rope3d'),
    ),
    'cameras': Figure(
        'encodings/maps_cameras.png',
        'encodings/camera-3d.md',
        'Camera encodings at initialisation on two views of a plane: similarity (plucker, petr, 3dppe), kernel (gta, '
        'prope)',
        ('plucker', 'petr', '3dppe', '3dppe:depth_source=gt', 'gta', 'prope'),
        grid=8,
        sizes=(8,),
    ),
    'choosing': Figure(
        'results/choosing_kernels.png',
        'results/choosing.md',
        'Relative kernels of the centre query at 1x, 2x and 4x the training grid (8x8), under none and interpolate',
        ('rope_axial', 'rope_mixed', 'alibi2d'),
        grid=8,
        sizes=(8, 16, 32),
        strategies=('none', 'interpolate'),
        queries=((0.5, 0.5),),
    ),
}


def draw(name: str, out: Path = ROOT / 'docs') -> str:
    """Draw FIGURES[name] into ``out``; returns the PNG's path."""
    from vispe.evaluation.encoding_maps import encoding_maps, model_maps
    from vispe.evaluation.encoding_plots import plot_maps

    fig = FIGURES[name]
    path = out / fig.path
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.checkpoint:
        from vispe.engine.config import load_config
        from vispe.evaluation.trained_model import encoding_label, load_model

        folder = ROOT / 'models' / fig.checkpoint
        cfg = load_config(str(folder / 'config.py'))
        model, meta = load_model(cfg, str(folder / f'{fig.checkpoint}.pth'), 'cpu')
        label = encoding_label(model, meta)
        result = model_maps(model, label, fig.grid, list(fig.sizes), fig.strategies, fig.queries)
    else:
        result = encoding_maps(list(fig.encodings), fig.grid, list(fig.sizes), fig.strategies, fig.queries)
    for note in result.get('notes', []):
        print(f'{name}: note: {note}')
    return plot_maps(result, str(path), fig.title)


def main(names: list[str]) -> None:
    for name in names or list(FIGURES):
        if name not in FIGURES:
            sys.exit(f'unknown figure {name!r}; choose from {", ".join(FIGURES)}')
        print(os.path.relpath(draw(name), ROOT))


if __name__ == '__main__':
    main(sys.argv[1:])
