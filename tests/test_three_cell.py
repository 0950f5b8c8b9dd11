"""LOOPE's Three-Cell benchmark as vispe rebuilds it (shapes2d 'three_cell_loope', vispe.datasets.three_cell): the
labels read back from the pixels, the patch-aligned cells, and the property that makes it a test of positional
encodings: without one, a ViT cannot tell two images apart."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest
import torch

from vispe.datasets.shapes2d import Shapes2D

GRID = 14


def colour_cells(image: np.ndarray, patch: int) -> dict[int, np.ndarray]:
    """(row, col) of the patch of each pure colour (0 red, 1 green, 2 blue) of an (H, W, 3) image in [0, 1]."""
    cells = image.reshape(GRID, patch, GRID, patch, 3).mean(axis=(1, 3))  # (14, 14, 3)
    found = {}
    for channel in range(3):
        rows, cols = np.nonzero(cells[..., channel] > 0.5)
        assert len(rows) == 1, f'{len(rows)} patches of colour {channel}'
        found[channel] = np.array([rows[0], cols[0]], dtype=float)
    return found


def expected_label(at: dict[int, np.ndarray]) -> tuple[int, float]:
    """(label, smallest gap between the colours' distances from the centre) recomputed from their cells: the label
    is the index of the order nearest-first among the permutations of (red, green, blue) in lexicographic order."""
    dist = {c: float(np.hypot(*(at[c] + 0.5 - GRID / 2))) for c in range(3)}
    order = tuple(sorted(range(3), key=dist.__getitem__))
    values = sorted(dist.values())
    return sorted(itertools.permutations(range(3))).index(order), min(b - a for a, b in zip(values, values[1:]))


def test_labels_read_back_from_the_pixels() -> None:
    ds = Shapes2D('three_cell_loope', num_samples=300, image_size=56)
    assert ds.num_classes == 6 and ds.classes[0] == 'red < green < blue' and ds.classes[5] == 'blue < green < red'
    labels, places = [], set()
    for i in range(300):
        image = ds.render_numpy(i)
        at = colour_cells(image, 4)
        label, lead = expected_label(at)
        assert label == ds.scene(i).label, f'item {i}'
        assert lead >= 1 - 1e-9  # the distances are well apart
        labels.append(label)
        places.update(tuple(v) for v in at.values())
    counts = collections.Counter(labels)
    assert set(counts) == set(range(6)) and min(counts.values()) > 30  # every class, near uniform (50 expected)
    assert len(places) > 150  # the cells cover most of the 196 places


def test_cells_are_whole_patches_at_56_and_224_px() -> None:
    """One cell = one patch, the paper's 224 px / 16 px as well as the CPU board's 56 px / 4 px: same tokens."""
    ds = Shapes2D('three_cell_loope', num_samples=5)
    for i in range(5):
        small, large = ds.render_numpy(i, 56), ds.render_numpy(i, 224)
        for image, patch in ((small, 4), (large, 16)):
            blocks = image.reshape(GRID, patch, GRID, patch, 3)
            assert np.array_equal(blocks.min(axis=(1, 3)), blocks.max(axis=(1, 3)))  # every patch one flat colour
        assert np.array_equal(small[::4, ::4], large[::16, ::16])
        assert sorted(np.unique(small.reshape(-1, 3), axis=0).tolist()) == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]


def test_without_positions_every_image_looks_the_same() -> None:
    """Every image is the same set of patches, so a ViT with no positional encoding gives every image the same
    output: chance (1/6) by construction, whatever it learns."""
    from vispe.experiments.compare import load_config
    from vispe.registry import MODELS

    torch.manual_seed(0)
    cfg = load_config('vit/vit_tiny_shapes2d_three_cell_loope.py', {'model.backbone.encoding': 'none'})
    model = MODELS.build(cfg.model).eval()
    ds = Shapes2D('three_cell_loope', split='val', num_samples=6, image_size=56)
    images = torch.stack([ds[i]['inputs'] for i in range(6)])
    assert len({ds.scene(i).label for i in range(6)}) > 1
    with torch.no_grad():
        out = model(images, mode='tensor')
        assert torch.allclose(out, out[:1].expand_as(out), atol=1e-5)
        features = model.backbone.forward_features(images)[:, 0]  # the class token the head reads
        spread = (features - features[:1]).abs().amax()
        assert spread < 1e-5
        cfg = load_config('vit/vit_tiny_shapes2d_three_cell_loope.py', {'model.backbone.encoding': 'ape_sincos'})
        with_pe = MODELS.build(cfg.model).eval().backbone.forward_features(images)[:, 0]
    # with positions, the same patches are told apart
    assert (with_pe - with_pe[:1]).abs().amax() > max(1e-3, 100 * spread)


@pytest.mark.parametrize('seed', [0, 1])
def test_the_answer_is_about_the_centre_not_the_shape_of_the_triangle(seed: int) -> None:
    """The eight symmetries of the square grid keep every distance from the centre, hence the label; a shift of the
    three cells keeps their triangle (every relative offset) but not, in general, the label."""
    ds = Shapes2D('three_cell_loope', num_samples=60, seed=seed)
    changed = 0
    for i in range(60):
        at = colour_cells(ds.render_numpy(i, 56), 4)
        label, _ = expected_label(at)
        flips = (lambda v: v[::-1].copy(), lambda v: np.array([GRID - 1 - v[0], v[1]]), lambda v: GRID - 1 - v)
        for flip in flips:
            assert expected_label({k: flip(v) for k, v in at.items()})[0] == label
        lo = min(v.min() for v in at.values())
        shifted = {k: v - lo for k, v in at.items()}  # into the top-left corner: same triangle
        changed += expected_label(shifted)[0] != label
    assert changed > 10  # offsets alone do not give the label: absolute position must come in (or leak at the border)


def test_board_runs_three_cell_alone_at_its_own_size(capsys) -> None:
    from vispe.experiments.compare import SHAPES2D_TASK_CONFIGS
    from workbench.leaderboard import main
    from workbench.leaderboard_runs import DEFAULT_TASKS, task_resolutions

    assert task_resolutions('three_cell_loope') == ['56'] and task_resolutions('position')[0] == '32'
    assert 'three_cell_loope' in SHAPES2D_TASK_CONFIGS and 'three_cell_loope' not in DEFAULT_TASKS
    for argv in (['--tasks', 'three_cell_loope', 'position'], ['--tasks', 'three_cell_loope', '--regimes', 'sizes']):
        with pytest.raises(SystemExit):
            main(argv + ['--no-train', '--out', 'unused'])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert 'three_cell_loope is a board of its own' in err and '--tasks three_cell_loope' in err


def test_classes_are_the_six_orders() -> None:
    from vispe.datasets import three_cell

    assert sorted(three_cell.ORDERS) == sorted(itertools.permutations(range(3)))
    assert len(three_cell.CLASSES) == len(set(three_cell.CLASSES)) == 6
