"""The Three-Cell benchmark (after LOOPE, Chowdhury et al. 2025, arXiv 2504.14386): Shapes2D task ``three_cell_loope``.

LOOPE's authors test how much positional information survives in a ViT with a synthetic task: a 224 px image cut
into 14 x 14 patches, three of the cells coloured, six classes. Their averages over several ViTs: no PE 59.4,
learned APE 87.8, 1D sine 93.1, CPVT 70.9, iRPE 70.1, Fourier 94.0, 2D sine 77.1. Only the paper's abstract and
summaries could be read here, which name the ingredients (three coloured cells on the patch grid; what is retained
of absolute and of relative position) but not the exact six classes. vispe's reconstruction, in its own terms:

- A ``GRID`` x ``GRID`` (14 x 14) grid of cells on a black scene; three distinct cells are painted pure red, green
  and blue. Each cell is exactly one patch when the image side is 14 times the patch size (224 px with 16 px patches
  as in the paper, or 56 px with 4 px patches, the CPU leaderboard's setting: the tokens are the same), so every
  image holds the same multiset of patches: 193 black ones and one of each colour. Without a positional encoding a
  ViT sees the same set of tokens in every image, and is at chance (1/6) by construction.
- Label (6 classes) = the order of the three colours by their distance from the image centre, nearest first
  ('red < green < blue', ...: the 3! permutations). Answering needs absolute position (where the centre is) and a
  comparison between the three cells. The three distances (between cell centres and the image centre, in cells)
  differ pairwise by at least ``MARGIN``, so no label is a near tie.
- Labels are uniform: the label is drawn first, then three cells with well separated distances, and the colours are
  dealt by rank.

An earlier draft asked which pair of colours lies farthest apart, and in which orientation (purely relative). It was
tried with a learned table only, for 22 of 30 epochs, and stayed at chance (loss 1.789 against ln 6 = 1.792); on the
present task the learned table too sits at chance for 19 epochs before it learns, so those 22 epochs did not show
that draft unlearnable. The present question was kept because a distance from the centre is carried by each coloured
token alone, which gives learning a signal from the start, and because it asks for absolute position as well as a
comparison. How this differs from the paper's numbers is said where vispe's results are tabled
(docs/results/leaderboard.md#three-cell-loopes-benchmark); the paper's no-PE score of 59.4 (against 16.7 here) says
its task leaves some answer in the patches' contents, which this one does not.
"""

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
