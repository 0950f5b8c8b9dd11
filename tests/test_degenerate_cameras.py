"""Degenerate cameras are refused where they enter vispe, with one line naming the view and the problem: a singular
or non-finite K and a pose that is not rigid used to give NaN tokens (plucker, petr) or pass silently (gta)."""

from __future__ import annotations

import pytest
import torch

from vispe import build_encoding
from vispe import geometry as G
from vispe.backbones.multiview import MultiViewTransformer
from vispe.datasets.multiview import TARGET_COLOUR, make_mesh, render
from vispe.encodings.build import encodings_declaring
from vispe.positions import Cameras, Positions, grid_coords

B, V, S, P = 2, 3, 16, 4
CAMERA_ENCODINGS = ['plucker', 'petr', 'gta']


def cameras() -> tuple[torch.Tensor, torch.Tensor]:
    """Valid intrinsics (B, V, 3, 3) and rigid poses (B, V, 4, 4), as a user makes them."""
    g = torch.Generator().manual_seed(0)
    eye = torch.nn.functional.normalize(torch.randn(B, V, 3, generator=g), dim=-1) * 3.5
    return G.intrinsics(20 + 10 * torch.rand(B, V, generator=g), S, S), G.look_at(eye, torch.zeros(B, V, 3))


def zero_K(K, poses):
    K[1, 2] = 0.0
    return K, poses


def zero_fx(K, poses):
    K[0, 1, 0, 0] = 0.0
    return K, poses


def zero_pose(K, poses):
    poses[1, 1] = 0.0
    return K, poses


def scaled_rotation(K, poses):
    poses[0, 2, :3, :3] *= 1.5
    return K, poses


def nan_pose(K, poses):
    poses[1, 0, 1, 3] = float('nan')
    return K, poses


def reflected_pose(K, poses):
    poses[0, 1, :3, 0] *= -1
    return K, poses


#: how each camera is broken -> the view it names and the problem the message states
BROKEN = {
    'zero K': (zero_K, 'batch 1, view 2', r'K is singular \(fx = K\[0, 0\] is 0\)'),
    'fx = 0': (zero_fx, 'batch 0, view 1', r'K is singular \(fx = K\[0, 0\] is 0\)'),
    'zero pose': (zero_pose, 'batch 1, view 1', r'cam_to_world is not rigid \(R\^T R is not I'),
    'scaled rotation': (scaled_rotation, 'batch 0, view 2', r'cam_to_world is not rigid \(R\^T R is not I'),
    'NaN in a pose': (nan_pose, 'batch 1, view 0', 'cam_to_world has NaN/Inf entries'),
    'reflection': (reflected_pose, 'batch 0, view 1', r'cam_to_world is not rigid \(det R is not \+1'),
}


def model(encoding) -> MultiViewTransformer:
    torch.manual_seed(0)
    return MultiViewTransformer(encoding=encoding, img_size=S, patch_size=P, embed_dim=16, depth=1, num_heads=2)


@pytest.mark.parametrize('case', list(BROKEN))
@pytest.mark.parametrize('encoding', CAMERA_ENCODINGS)
def test_multiview_transformer_refuses_a_degenerate_camera_naming_its_view(encoding, case) -> None:
    breaks, view, problem = BROKEN[case]
    K, poses = breaks(*cameras())
    with pytest.raises(ValueError, match=rf'^camera \({view}\): {problem}.*; pass [^\n]*$'):
        model(encoding)(torch.rand(B, V, 3, S, S), K, poses)


@pytest.mark.parametrize('encoding', CAMERA_ENCODINGS)
def test_an_encoding_given_degenerate_cameras_directly_refuses_them(encoding) -> None:
    """Built on its own (``build_encoding``) and handed positions, an encoding gets the same check."""
    enc = build_encoding(encoding, dim=16, num_heads=2, ndim=2, patch_size=P)
    K, poses = zero_K(*cameras())
    h = w = S // P
    with pytest.raises(ValueError, match=r'^camera \(batch 1, view 2\): K is singular'):
        pos = Positions(
            grid_coords(h, w).repeat(V, 1),
            cameras=Cameras(K, poses, torch.arange(V).repeat_interleave(h * w), (S, S), P),
        )
        q = torch.randn(B, 2, V * h * w, 8)
        enc.embed(torch.randn(B, V * h * w, 16), pos) if encoding != 'gta' else enc.rotate(q, q, pos)


def tiny_focal(K, poses):
    K[1, 0, 0, 0] = 1e-30
    return K, poses


def huge_focal(K, poses):
    K[0, 2, 1, 1] = 1e30
    return K, poses


def far_translation(K, poses):
    poses[1, 2, 0, 3] = 1e25
    return K, poses


#: cameras that are valid in form but overflow float32 in the encodings: prope, plucker and gta gave NaN, exit 0
EXTREME = {
    'fx = 1e-30': (tiny_focal, 'batch 1, view 0', 'K has a focal length under 1e-09'),
    'fy = 1e30': (huge_focal, 'batch 0, view 2', 'K has a focal length under 1e-09 or an entry over 1e[+]09'),
    'translation 1e25': (far_translation, 'batch 1, view 2', 'cam_to_world has an entry over 1e[+]09'),
}


@pytest.mark.parametrize('case', list(EXTREME))
@pytest.mark.parametrize('encoding', encodings_declaring('needs_cameras'))
def test_extreme_cameras_are_refused_never_nan(encoding, case) -> None:
    breaks, view, problem = EXTREME[case]
    K, poses = cameras()
    net = model(encoding).eval()
    assert torch.isfinite(net(torch.rand(B, V, 3, S, S), K, poses)).all()
    with pytest.raises(ValueError, match=rf'^camera \({view}\): {problem}.*rescale|^camera \({view}\): {problem}'):
        net(torch.rand(B, V, 3, S, S), *breaks(K, poses))
    edge = cameras()  # the largest values the check lets through still give finite outputs
    edge[0][0, 0, 0, 0], edge[0][0, 0, 1, 1], edge[1][0, 0, :3, 3] = G.CAMERA_MAX, G.CAMERA_MAX, G.CAMERA_MAX
    edge[0][1, 0, 0, 0] = edge[0][1, 0, 1, 1] = 1 / G.CAMERA_MAX
    assert torch.isfinite(net(torch.rand(B, V, 3, S, S), *edge)).all()


def test_the_message_counts_the_other_bad_views_and_checks_the_last_rows() -> None:
    K, poses = cameras()
    poses[:, :, 3, 0] = 0.5  # every view's last row
    with pytest.raises(ValueError, match=r'^camera \(batch 0, view 0\): cam_to_world has last row .* \(and 5 more'):
        G.check_cameras(K, poses)
    K, poses = cameras()
    K[0, 0, 1, 1] = 0.0
    with pytest.raises(ValueError, match=r'fy = K\[1, 1\] is 0'):
        G.check_cameras(K, poses)
    K, poses = cameras()
    K[1, 1, 2, 2] = 0.0
    with pytest.raises(ValueError, match=r'^camera \(batch 1, view 1\): K has last row other than \(0, 0, 1\)'):
        G.check_cameras(K, poses)
    K[1, 1, 2, 2] = float('inf')
    with pytest.raises(ValueError, match=r'^camera \(batch 1, view 1\): K has NaN/Inf entries'):
        G.check_cameras(K, poses)


@pytest.mark.parametrize('encoding', CAMERA_ENCODINGS)
def test_valid_cameras_pass_unchanged(encoding) -> None:
    K, poses = cameras()
    images = torch.rand(B, V, 3, S, S)
    net = model(encoding).eval()
    out = net(images, K, poses)
    assert out.shape == (B, 3) and torch.isfinite(out).all()
    # within the tolerance: float32 rounding of a rotation, a small drift, and half-precision cameras
    drift = poses.clone()
    drift[..., :3, :3] *= 1 + 2e-4
    assert torch.isfinite(net(images, K, drift)).all()
    assert torch.isfinite(net(images, K.bfloat16(), poses.bfloat16())).all()
    with torch.autocast('cpu', dtype=torch.bfloat16):  # the check itself must not run in bf16
        assert torch.isfinite(net(images, K, poses).float()).all()
    pos = net.positions(images, K, poses)
    assert pos.cameras is not None and pos.cameras.K is K and pos.cameras.cam_to_world is poses  # not copied


def test_render_refuses_a_degenerate_camera_naming_its_view() -> None:
    K, poses = (
        G.intrinsics(torch.tensor([30.0, 40.0]), 8, 8),
        G.look_at(torch.tensor([[3.0, 0, 0], [0, 3.0, 0]]), torch.zeros(2, 3)),
    )
    K[1, 0, 0] = 0.0
    sphere = make_mesh('sphere', 0.3)
    with pytest.raises(ValueError, match=r'^camera \(view 1\): K is singular'):
        render([(sphere, TARGET_COLOUR)], K, poses, 8, 8)
