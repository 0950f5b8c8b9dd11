"""The Three-Cell benchmark (after LOOPE, Chowdhury et al. 2025), Shapes2D task ``three_cell_loope``: three distinct
cells of a 14 x 14 grid (one patch each) painted red, green and blue; the label is the colours' order by distance from
the centre (pairwise at least ``MARGIN`` apart), so without positions a ViT is at chance (1/6). A reconstruction: the
paper's classes are not published (docs: the leaderboard's Three-Cell section)."""

from __future__ import annotations

import itertools

import numpy as np

from vispe.datasets.scene2d import Scene, Shape

GRID = 14
#: the paper's rows, by vispe's name for each: (the paper's name, its average top-1 over its ViTs)
PAPER_AVERAGES = {
    'none': ('no PE', 59.4),
    'ape_learned': ('learned APE', 87.8),
    'loope:order=raster,context=false': ('1D sine', 93.1),
    'peg': ('CPVT', 70.9),
    'irpe': ('iRPE', 70.1),
    'lff': ('Fourier', 94.0),
    'ape_sincos': ('2D sine', 77.1),
}
#: a run has left chance once an epoch's mean training loss is below this (chance: ln 6 = 1.792)
ESCAPE_LOSS = 1.5
MARGIN = 1.0  # in cells: the three distances from the centre differ pairwise by this much
COLOUR_NAMES = ('red', 'green', 'blue')
#: the classes: orders of the colours (indices into COLOUR_NAMES), nearest to the centre first
ORDERS = tuple(itertools.permutations(range(3)))
CLASSES = tuple(' < '.join(COLOUR_NAMES[c] for c in order) for order in ORDERS)
PURE_RGB = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
MAX_TRIES = 1000


def centre_distances(rows_cols: np.ndarray) -> np.ndarray:
    """Distances (in cells) from the image centre to the centres of cells (..., 2) given as (row, col)."""
    return np.linalg.norm(rows_cols + 0.5 - GRID / 2, axis=-1)


def three_cell_scene(rng: np.random.Generator) -> Scene:
    """Three cells of the 14 x 14 grid painted red, green, blue; label = their order by distance from the centre."""
    label = int(rng.integers(len(CLASSES)))
    for _ in range(MAX_TRIES):
        rc = np.stack(np.divmod(rng.choice(GRID * GRID, size=3, replace=False), GRID), axis=1).astype(float)
        dist = np.sort(centre_distances(rc))
        if np.diff(dist).min() >= MARGIN:
            break
    else:
        raise RuntimeError('could not draw three cells at distinct distances')  # unreachable: ~33% of draws pass
    rank = np.argsort(centre_distances(rc))  # cell indices, nearest first
    colour_of = {int(cell): ORDERS[label][k] for k, cell in enumerate(rank)}
    shapes = tuple(
        Shape('square', ((c + 0.5) / GRID, (r + 0.5) / GRID), 0.5 / GRID, PURE_RGB[colour_of[k]])
        for k, (r, c) in enumerate(rc)
    )
    return Scene(label, shapes)
