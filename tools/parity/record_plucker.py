"""Record CameraCtrl's Plücker ray maps (hehao13/CameraCtrl) into tests/data/parity/plucker.pt, which
tests/parity/test_parity_cameractrl.py compares vispe's ``plucker`` with.

The reference is hehao13/CameraCtrl at commit af45a7a0dbeedb7f6ed66aac4a9e5411a279f0d2,
``cameractrl/data/dataset.py``: ``ray_condition`` gives, for every pixel centre (u + 0.5, v + 0.5) of each view,
the ray's Plücker coordinates (o x d, d) from the intrinsics (fx, fy, cx, cy in pixels) and the camera-to-world
pose, which CameraCtrl's camera encoder then takes; ``RealEstate10KPose.get_relative_pose`` expresses the poses
relative to the first view (with ``zero_t_first_frame``, as its training configs set it). Both run as they are from
the repository, the module loaded by path; it imports decord for its video reader, which the recorded functions do
not use, so decord is stood in for (``stand_ins.py``). Recorded:

- the ray map of two 8 x 12 views (float64): vispe's ``patchify=True`` rays, patch by patch;
- the ray map of the same cameras at patch resolution (K divided by the patch size, 2 x 3 cells): the ray through
  each patch centre, vispe's ``patchify=False``;
- the ray map with the poses relative to view 0 (float32, as the dataset casts them): vispe's ``relative=True``.

Commands:

    git --git-dir=<mirror of hehao13/CameraCtrl> archive HEAD | tar -x -C /tmp/ref/CameraCtrl
    CAMERACTRL_ROOT=/tmp/ref/CameraCtrl PYTHONPATH=. python tools/parity/record_plucker.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stand_ins  # noqa: E402

ROOT = os.environ.get('CAMERACTRL_ROOT', '/tmp/ref/CameraCtrl')
COMMIT = 'af45a7a0dbeedb7f6ed66aac4a9e5411a279f0d2'
FILE = 'cameractrl/data/dataset.py'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'plucker.pt')
VIEWS, GRID, PATCH = 2, (2, 3), 4


def main() -> None:
    torch.set_default_dtype(torch.float64)
    stand_ins.install(['decord'])
    spec = importlib.util.spec_from_file_location('cameractrl_dataset', os.path.join(ROOT, FILE))
    dataset = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dataset)

    h, w = GRID
    generator = torch.Generator().manual_seed(0)
    cam_to_world = stand_ins.random_poses(generator, VIEWS)[None]  # (B 1, V, 4, 4)
    K = torch.tensor([[[10.0, 9.0, 6.5, 3.5], [7.0, 8.0, 5.0, 4.5]]])  # (B, V, 4): fx, fy, cx, cy in pixels
    rays = dataset.ray_condition(K, cam_to_world, h * PATCH, w * PATCH, device='cpu')  # (B, V, H, W, 6)
    centres = dataset.ray_condition(K / PATCH, cam_to_world, h, w, device='cpu')  # (B, V, h, w, 6)

    entries = []  # the dataset's camera lines: frame, fx, fy, cx, cy (normalised), 0, 0, world-to-camera 3 x 4
    for k, pose in zip(K[0], cam_to_world[0]):
        norm = [k[0] / (w * PATCH), k[1] / (h * PATCH), k[2] / (w * PATCH), k[3] / (h * PATCH)]
        entries.append([0.0, *map(float, norm), 0.0, 0.0, *torch.linalg.inv(pose)[:3].flatten().tolist()])
    settings = types.SimpleNamespace(zero_t_first_frame=True)
    relative = dataset.RealEstate10KPose.get_relative_pose(settings, [dataset.Camera(e) for e in entries])
    relative = torch.as_tensor(relative)[None]  # float32, as the dataset gives it
    rays_relative = dataset.ray_condition(K.float(), relative, h * PATCH, w * PATCH, device='cpu')

    record = {
        'reference': f'hehao13/CameraCtrl@{COMMIT}:{FILE}:ray_condition',
        'source_sha256': stand_ins.sha256(os.path.join(ROOT, FILE)),
        'grid': list(GRID), 'patch_size': PATCH, 'cam_to_world': cam_to_world, 'K': K,
        'rays': rays, 'rays_centres': centres, 'rays_relative': rays_relative,
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)')


if __name__ == '__main__':
    main()
