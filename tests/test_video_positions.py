"""Tests for the positions of video tokens (``vispe.positions.video_positions``): their order matches a tubelet
embedding's flattened output, and the time between tubelets is a property of the positions."""

from __future__ import annotations

import pytest
import torch

from vispe.positions import grid_coords, lattice_coords, video_positions


def test_video_coordinates_follow_the_flattened_tubelet_grid() -> None:
    """Token i of a Conv3d output flattened over (T, H, W) sits at coordinate i of the positions."""
    t, h, w = 3, 2, 4
    grid = torch.stack(torch.meshgrid(*(torch.arange(n) for n in (t, h, w)), indexing='ij'))  # (3, t, h, w)
    flat = grid.flatten(1).T.float()  # what a (B, C, t, h, w) -> (B, t*h*w, C) flatten puts in token order
    pos = video_positions(t, h, w, num_prefix=1)
    assert torch.equal(pos.coords, flat)
    assert pos.grid == (t, h, w) and pos.num_prefix == 1 and pos.ndim == 3 and pos.num_tokens == t * h * w
    assert pos.span == (t, h, w) and torch.equal(pos.span_tensor(), torch.tensor([3.0, 2.0, 4.0]))


def test_time_spacing_scales_time_only_and_the_span() -> None:
    one, two = video_positions(4, 2, 2), video_positions(4, 2, 2, time_spacing=2.0)
    assert torch.equal(two.coords[:, 0], 2 * one.coords[:, 0])
    assert torch.equal(two.coords[:, 1:], one.coords[:, 1:])
    assert two.spacing == (2.0, 1.0, 1.0) and one.spacing is None
    # four tubelets two apart cover the time of eight one apart: the same span as the training clip's
    assert two.span == video_positions(8, 2, 2).span == (8.0, 2, 2)
    assert torch.equal(two.span_tensor(), torch.tensor([8.0, 2.0, 2.0]))
    assert one.cache_key() != two.cache_key()
    with pytest.raises(ValueError, match='time_spacing must be > 0'):
        video_positions(4, 2, 2, time_spacing=0.0)


def test_lattice_coords_generalise_grid_coords() -> None:
    assert torch.equal(lattice_coords((3, 5)), grid_coords(3, 5))
    assert lattice_coords((2, 3, 4, 5)).shape == (120, 4)
    assert torch.equal(lattice_coords((2, 3, 4))[-1], torch.tensor([1.0, 2.0, 3.0]))
