"""The Three-Cell benchmark (after LOOPE, Chowdhury et al. 2025, arXiv 2504.14386): Shapes2D task ``three_cell_loope``.

LOOPE's authors test how much positional information survives in a ViT with a synthetic task: a 224 px image cut
into 14 x 14 patches, three of the cells coloured, six classes. Their averages over several ViTs: no PE 59.4,
learned APE 87.8, 1D sine 93.1, CPVT 70.9, iRPE 70.1, Fourier 94.0, 2D sine 77.1. Only the paper's abstract and
summaries could be read here, which name the ingredients (three coloured cells on the patch grid; questions of
distance and orientation) but not the exact six classes. vispe's reconstruction, in its own terms:

- A ``GRID`` x ``GRID`` (14 x 14) grid of cells on a black scene; three distinct cells, drawn uniformly, are painted
  pure red, green and blue. Each cell is exactly one patch when the image side is 14 times the patch size (224 px
  with 16 px patches as in the paper, or 56 px with 4 px patches, the CPU leaderboard's setting: the tokens are the
  same), so every image holds the same multiset of patches: 193 black ones and one of each colour. Without a
  positional encoding a ViT sees the same set of tokens in every image, and is at chance (1/6) by construction.
- Label (6 classes) = which pair of colours lies farthest apart (3: red-green, red-blue, green-blue; Euclidean
  distance between cell centres, in cells) x how that pair is oriented (2: ``horizontal`` when its column offset
  exceeds its row offset, ``vertical`` otherwise). Draws are kept only when the farthest pair beats the second by at
  least ``MARGIN`` (2) cells and its row and column offsets differ by as much, so every label is clear at a glance.
- Labels are uniform: the label is drawn first; a geometry with the wrong orientation is transposed (rows and columns
  swapped, which keeps every distance), and the colours are dealt so that the farthest pair gets the label's two.

Answering needs where each colour is relative to the others (distance, then direction): relative information, read
off the whole 14 x 14 grid. How this differs from the paper's numbers is said where vispe's results are tabled
(docs/results/leaderboard.md#three-cell); the paper's no-PE score of 59.4 (against 16.7 here) says its task leaves
some answer in the patches' contents, which this one does not.
"""

from __future__ import annotations

import numpy as np

from vispe.datasets.scene2d import Scene, Shape

GRID = 14
MARGIN = 2.0  # in cells: the farthest pair beats the second farthest, and its longer offset the shorter, by this much
PAIRS = ((0, 1), (0, 2), (1, 2))  # indices into (red, green, blue)
PAIR_NAMES = ('red-green', 'red-blue', 'green-blue')
ORIENTATIONS = ('horizontal', 'vertical')
CLASSES = tuple(f'{pair} {orientation}' for pair in PAIR_NAMES for orientation in ORIENTATIONS)
PURE_RGB = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
MAX_TRIES = 1000


def farthest_pair(cells: np.ndarray) -> tuple[int, float]:
    """(index into PAIRS of the farthest pair, its lead over the second farthest in cells) of three (row, col)."""
    dists = [float(np.linalg.norm(cells[i] - cells[j])) for i, j in PAIRS]
    order = np.argsort(dists)
    return int(order[-1]), dists[order[-1]] - dists[order[-2]]


def three_cell_scene(rng: np.random.Generator) -> Scene:
    """Three cells of the 14 x 14 grid painted red, green, blue; label = farthest pair x its orientation."""
    label = int(rng.integers(len(CLASSES)))
    want_pair, want_orientation = divmod(label, len(ORIENTATIONS))
    for _ in range(MAX_TRIES):
        rc = np.stack(np.divmod(rng.choice(GRID * GRID, size=3, replace=False), GRID), axis=1).astype(float)
        far, lead = farthest_pair(rc)
        d_row, d_col = np.abs(rc[PAIRS[far][0]] - rc[PAIRS[far][1]])
        if lead >= MARGIN and abs(d_row - d_col) >= MARGIN:
            break
    else:
        raise RuntimeError('could not draw three cells with a clear farthest pair')  # unreachable: ~40% of draws pass
    if (0 if d_col > d_row else 1) != want_orientation:
        rc = rc[:, ::-1].copy()  # transpose the grid: distances stay, the orientation flips
    a, b = PAIRS[far]
    near = 3 - a - b
    first, second = PAIRS[want_pair]
    if rng.uniform() < 0.5:
        first, second = second, first
    colour_of = {a: first, b: second, near: 3 - first - second}
    shapes = tuple(
        Shape('square', ((c + 0.5) / GRID, (r + 0.5) / GRID), 0.5 / GRID, PURE_RGB[colour_of[k]])
        for k, (r, c) in enumerate(rc)
    )
    return Scene(label, shapes)
