"""MultiViewScenes: procedural multi-view renders with cameras, and the ray-cast renderer behind them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vispe.datasets import MultiViewScenes
from vispe.datasets.multiview import PLACEMENT_BOX, TARGET_COLOUR, make_mesh, render
from vispe.geometry import camera_points, intrinsics, look_at, pixel_centres, project
from vispe.registry import DATASETS


def _red(rgb: torch.Tensor) -> torch.Tensor:
    """Mask (..., H, W) of red pixels in (..., 3, H, W) renders (shaded red keeps g, b well under r)."""
    r, g, b = rgb.unbind(-3)
    return (r > 0.25) & (g < 0.5 * r) & (b < 0.5 * r)


def test_deterministic_from_seed_split_and_index() -> None:
    a, b = MultiViewScenes(num_samples=8, seed=3), MultiViewScenes(num_samples=8, seed=3)
    for i in (0, 5):
        x, y = a[i], b[i]
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    other_seed, other_split = MultiViewScenes(num_samples=8, seed=4), MultiViewScenes('val', num_samples=8, seed=3)
    for other in (other_seed, other_split):
        assert not torch.equal(a[5]['target'], other[5]['target'])
        assert not torch.equal(a[5]['inputs'], other[5]['inputs'])
    assert not torch.equal(a[4]['cam_to_world'], a[5]['cam_to_world'])  # items differ too


def test_item_shapes_dtypes_and_ranges() -> None:
    ds = MultiViewScenes(num_samples=4, num_views=3, image_size=(24, 32))
    assert ds.metainfo == {'num_views': 3, 'image_size': (24, 32)} and len(ds) == 4
    item = ds[1]
    shapes = {'inputs': (3, 3, 24, 32), 'depth': (3, 1, 24, 32), 'K': (3, 3, 3), 'cam_to_world': (3, 4, 4)}
    shapes['target'] = (3,)
    for key, shape in shapes.items():
        assert item[key].shape == shape and item[key].dtype == torch.float32, key
        assert torch.isfinite(item[key]).all(), key
    rgb, depth, K, pose = item['inputs'], item['depth'], item['K'], item['cam_to_world']
    assert 0 <= rgb.min() and rgb.max() <= 1
    background = depth[:, 0] == 0
    assert background.any() and (~background).any()  # every view has objects and background
    assert torch.allclose(rgb.permute(0, 2, 3, 1)[background], torch.tensor(0.2))  # grey 0.2 where nothing is hit
    assert (depth[:, 0][~background] > 0.5).all()
    # K: square pixels, principal point at the centre, focal from a horizontal field of view in [40, 70] degrees
    assert torch.equal(K[:, 0, 0], K[:, 1, 1]) and torch.allclose(K[:, :2, 2], torch.tensor([16.0, 12.0]))
    low, high = 16 / math.tan(math.radians(35)), 16 / math.tan(math.radians(20))
    assert ((K[:, 0, 0] >= low - 1e-4) & (K[:, 0, 0] <= high + 1e-4)).all()
    # poses: rigid, cameras above the ground plane (positive elevation) about 3 to 4.5 from the origin
    rot = pose[:, :3, :3]
    assert torch.allclose(rot @ rot.transpose(1, 2), torch.eye(3).expand(3, 3, 3), atol=1e-5)
    assert torch.allclose(torch.det(rot), torch.ones(3), atol=1e-5)
    assert torch.equal(pose[:, 3], torch.tensor([0.0, 0.0, 0.0, 1.0]).expand(3, 4))
    assert (pose[:, 2, 3] > 0).all() and (pose[:, :3, 3].norm(dim=-1) > 2.0).all()
    assert (pose[:, :3, 3].norm(dim=-1) < 6.0).all()


def test_red_sphere_appears_where_the_camera_model_says() -> None:
    centre, radius, height, width = torch.tensor([0.4, -0.3, 0.2]), 0.3, 48, 64
    eye = torch.tensor([3.5, 1.5, 2.0])
    pose = look_at(eye, torch.zeros(3))  # looking at the origin: the sphere is off the image centre
    K = intrinsics(50.0, height, width)
    sphere = make_mesh('sphere', radius).translate(centre.double().numpy())
    rgb, depth = render([(sphere, TARGET_COLOUR)], K, pose, height, width)
    assert rgb.shape == (3, height, width) and depth.shape == (height, width)
    uv, z = project(K, pose, centre[None])
    (u, v), z = uv[0], float(z[0])
    assert 8 < u < width - 8 and 8 < v < height - 8 and abs(u - width / 2) > 3  # inside, and not at the centre
    red = _red(torch.from_numpy(rgb))
    assert red.sum() > 30 and torch.equal(red, torch.from_numpy(depth > 0))  # only the sphere, and all of it red
    centres = pixel_centres(height, width).reshape(height, width, 2)
    centroid = centres[red].mean(0)
    assert torch.linalg.norm(centroid - uv[0]) < 1.0, (centroid, uv[0])
    nearest = depth[int(v), int(u)]  # the pixel that holds (u, v)
    assert nearest == pytest.approx(z - radius, rel=0.03)
    # and the renderer's depth is camera z: back-projected red pixels lie on the sphere
    points = camera_points(K, centres[red], torch.from_numpy(depth)[red][:, None])
    world = points @ pose[:3, :3].T + pose[:3, 3]
    assert ((world - centre).norm(dim=-1) - radius).abs().max() < 0.03


def test_target_is_in_every_view_and_in_the_placement_box() -> None:
    ds = MultiViewScenes(num_samples=20, num_views=3)
    height, width = ds.image_size
    box = torch.tensor(PLACEMENT_BOX)
    for i in range(len(ds)):
        item = ds[i]
        target = item['target']
        assert (target.abs() <= box + 1e-6).all(), target
        uv, z = project(item['K'], item['cam_to_world'], target.expand(3, 1, 3))  # (V, 1, 2), (V, 1)
        assert (z > 0).all()
        assert ((uv[..., 0] >= 0) & (uv[..., 0] < width) & (uv[..., 1] >= 0) & (uv[..., 1] < height)).all(), uv
        red = _red(item['inputs'])  # (V, H, W)
        assert red.flatten(1).any(1).all()  # the red object is seen in every view
        # its depth pixels back-project near the target: the renderer and the stored cameras agree
        for view in range(3):
            uv_red = pixel_centres(height, width).reshape(height, width, 2)[red[view]]
            cam = camera_points(item['K'][view], uv_red, item['depth'][view, 0][red[view]][:, None])
            world = cam @ item['cam_to_world'][view, :3, :3].T + item['cam_to_world'][view, :3, 3]
            assert (world - target).norm(dim=-1).max() < 0.45 * math.sqrt(3) + 0.05


def test_target_is_the_bounding_box_centre_of_the_placed_mesh() -> None:
    ds = MultiViewScenes(num_samples=6)
    for i in range(6):
        meshes, colours, target = ds.objects(np.random.default_rng([0, 0, i]))
        assert np.allclose(colours[0], TARGET_COLOUR) and not np.any(np.all(np.isclose(colours[1:], colours[0]), 1))
        assert np.allclose(meshes[0].get_axis_aligned_bounding_box().get_center(), target, atol=1e-9)
        assert torch.allclose(ds[i]['target'], torch.from_numpy(target).float())
        assert len({tuple(c) for c in colours}) == len(colours)  # distinct colours


@pytest.mark.parametrize(
    'kwargs,match',
    [
        (dict(split='dev'), 'unknown split'),
        (dict(num_views=0), 'num_views must be'),
        (dict(image_size=(32, 0)), 'image_size must be'),
        (dict(num_objects=(0, 2)), 'num_objects must be'),
        (dict(num_objects=(2, 9)), 'max <= 6'),
        (dict(fov_range=(70.0, 40.0)), r'fov_range .*min <= max'),
        (dict(fov_range=(40.0, 180.0)), 'max < 180'),
        (dict(distance_range=(-1.0, 2.0)), 'distance_range must be'),
        (dict(elevation_range=(15.0, 90.0)), 'elevation_range'),
        (dict(size_range=(0.2,)), r'size_range must be a \(min, max\) pair'),
        (dict(look_jitter=-0.1), 'look_jitter must be >= 0'),
        (dict(seed=-1), 'non-negative'),
    ],
)
def test_bad_arguments_say_what_to_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MultiViewScenes(**kwargs)


def test_registry_build_and_index_errors() -> None:
    from mmengine.registry import init_default_scope

    init_default_scope('vispe')
    ds = DATASETS.build(dict(type='MultiViewScenes', num_samples=3, num_views=4, image_size=16))
    assert isinstance(ds, MultiViewScenes) and ds[2]['inputs'].shape == (4, 3, 16, 16)
    with pytest.raises(IndexError):
        ds[3]


def test_render_batches_views_shades_faces_and_returns_ids() -> None:
    box = make_mesh('box', 0.3)  # axis-aligned cube about the origin
    eyes = torch.tensor([[3.0, 0.0, 1.0], [0.0, -3.0, 1.0]])
    poses = look_at(eyes, torch.zeros(2, 3))
    K = intrinsics(torch.tensor([30.0, 40.0]), 20, 20)
    rgb, depth, ids = render([(box, (1.0, 1.0, 1.0))], K, poses, 20, 20, return_ids=True)
    assert rgb.shape == (2, 3, 20, 20) and depth.shape == ids.shape == (2, 20, 20)
    assert set(np.unique(ids).tolist()) == {-1, 0} and np.array_equal(ids == 0, depth > 0)
    assert (ids[1] == 0).sum() > (ids[0] == 0).sum()  # longer focal length: bigger box
    assert np.allclose(rgb[ids[:, None].repeat(3, 1) == -1], 0.2)
    # Lambert: 0.3 + 0.7 max(0, n . l), l = (0.3, -0.5, 1) / |.|; view 0 sees the +x face and the top face
    light = np.array([0.3, -0.5, 1.0]) / np.linalg.norm([0.3, -0.5, 1.0])
    top, side = 0.3 + 0.7 * light[2], 0.3 + 0.7 * light[0]
    shades = rgb[0, 0][ids[0] == 0]
    assert np.allclose(rgb[0, 0], rgb[0, 1]) and np.allclose(rgb[0, 0], rgb[0, 2])  # white stays grey
    near_top, near_side = np.isclose(shades, top, atol=1e-4), np.isclose(shades, side, atol=1e-4)
    assert (near_top | near_side).all() and near_top.sum() > 5 and near_side.sum() > 5
    # the top face is in the upper part of the image (world +z is up, image v grows downwards)
    rows = np.nonzero(np.isclose(rgb[0, 0], top, atol=1e-4))[0]
    assert rows.mean() < np.nonzero(np.isclose(rgb[0, 0], side, atol=1e-4))[0].mean()
