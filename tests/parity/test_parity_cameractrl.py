"""Parity with CameraCtrl's ray maps (hehao13/CameraCtrl, cameractrl/data/dataset.py: ``ray_condition`` and
``RealEstate10KPose.get_relative_pose``; recorder: tools/parity/record_plucker.py): vispe's ``plucker`` computes the
authors' Plücker coordinates (o x d, d) for every pixel of every patch (``patchify=True``), for the patch centres
(``patchify=False``) and with poses relative to view 0 (``relative=True``), and adds its linear embedding of exactly
those rays. CameraCtrl's own camera encoder (pixel-unshuffle and convolutions, for a video diffusion model) is not
vispe's, which embeds each patch's rays by one linear layer: only the rays are compared."""

from __future__ import annotations

import pytest
import torch
from recorded import recorded

from vispe import build_encoding
from vispe.encodings.plucker import Plucker
from vispe.positions import Cameras, Positions, grid_coords

#: what this file holds parity for: encodings by name, strategies as 'strategy:<name>'
METHODS = ('plucker',)


def positions(record: dict) -> Positions:
    (h, w), p = record['grid'], record['patch_size']
    fx, fy, cx, cy = record['K'].unbind(-1)  # (B, V) each
    K = torch.zeros(*fx.shape, 3, 3)
    K[..., 0, 0], K[..., 1, 1], K[..., 0, 2], K[..., 1, 2], K[..., 2, 2] = fx, fy, cx, cy, 1.0
    poses = record['cam_to_world'].float()
    views = poses.shape[1]
    cameras = Cameras(K, poses, torch.arange(views).repeat_interleave(h * w), (h * p, w * p), p)
    return Positions(grid_coords(h, w).repeat(views, 1), cameras=cameras)


def plucker(record: dict, **options) -> Plucker:
    (h, w), p = record['grid'], record['patch_size']
    enc = build_encoding({'type': 'plucker', **options}, dim=8, ndim=2, grid_size=(h, w), patch_size=p)
    assert isinstance(enc, Plucker)
    return enc


def per_patch(record: dict, rays: torch.Tensor) -> torch.Tensor:
    """The reference's (B, V, H, W, 6) ray map as vispe's tokens (B, V h w, p p 6): each patch's pixels row-major."""
    (h, w), p = record['grid'], record['patch_size']
    B, V = rays.shape[:2]
    return rays.reshape(B, V, h, p, w, p, 6).permute(0, 1, 2, 4, 3, 5, 6).reshape(B, V * h * w, p * p * 6)


@pytest.mark.parametrize(('name', 'options'), [('rays', {}), ('rays_relative', {'relative': True})])
def test_every_pixel_ray_matches_the_authors_ray_map(name: str, options: dict) -> None:
    """The rays of every pixel of every patch (moments of order 1-5) to float32 rounding, and the added table is the
    linear embedding of exactly those rays."""
    record = recorded('plucker')
    assert record['reference'].startswith('hehao13/CameraCtrl@af45a7a')
    enc, pos = plucker(record, **options), positions(record)
    expected = per_patch(record, record[name]).float()
    torch.testing.assert_close(enc.rays(pos), expected, atol=2e-5, rtol=1e-5)
    with torch.no_grad():
        x = torch.randn(*expected.shape[:2], 8)
        torch.testing.assert_close(enc.embed(x, pos) - x, enc.proj(expected), atol=1e-5, rtol=1e-5)


def test_patch_centre_rays_match_the_authors_map_at_patch_resolution() -> None:
    """``patchify=False``: the ray through each patch centre, the reference's map of the cameras at patch resolution
    (K divided by the patch size)."""
    record = recorded('plucker')
    enc, pos = plucker(record, patchify=False), positions(record)
    expected = record['rays_centres'].flatten(1, 3).float()
    torch.testing.assert_close(enc.rays(pos), expected, atol=2e-5, rtol=1e-5)


def test_absolute_and_relative_rays_differ() -> None:
    """The relative rays are another map than the absolute ones: the test tells ``relative`` apart."""
    record = recorded('plucker')
    pos = positions(record)
    assert (plucker(record).rays(pos) - per_patch(record, record['rays_relative']).float()).abs().max() > 0.1
