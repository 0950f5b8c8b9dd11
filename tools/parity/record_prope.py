"""Record PRoPE's attention (liruilong940607/prope) into tests/data/parity/prope.pt, which
tests/parity/test_parity_prope.py compares vispe's ``prope`` with.

The reference is liruilong940607/prope at commit a601c223d98fb7eebf75f614493b6d4b4a8a4b50,
``prope/per_img_camera.py`` (earlier commits named it ``prope/torch.py``): ``PropeDotProductAttention`` (its
``forward``, i.e. ``prope_dot_product_attention``, and ``_precompute_and_cache_apply_fns`` with ``_apply_to_q`` and
``_apply_to_kv`` for the logits), run as it is from a local copy of that file, loaded by path (it imports torch
only). Three camera sets on the same q, k, v and poses:

- ``Ks`` without skew: where vispe and the reference must agree;
- the same ``Ks`` with a skew K[0, 1]: the reference's normalised K' and its inverse keep f_x, f_y, c_x, c_y only
  (``_invert_K`` "assumes no skew"), so it gives the zero-skew result; vispe keeps the skew unless ``skew=False``;
- ``Ks=None``: the reference's formula without intrinsics (P = E), vispe's ``intrinsics=False``.

Commands (the reference's file copied to /tmp/ref/prope/prope/per_img_camera.py):

    PROPE_FILE=/tmp/ref/prope/prope/per_img_camera.py PYTHONPATH=. python tools/parity/record_prope.py

The file holds the cameras (OpenCV, camera-to-world), q, k, v in the reference's channel order, and the reference's
outputs and logits (q' k'^T, unscaled) for each camera set, in float64 (the reference's own tests run in float64).
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stand_ins  # noqa: E402

FILE = os.environ.get('PROPE_FILE', '/tmp/ref/prope/prope/per_img_camera.py')
COMMIT = 'a601c223d98fb7eebf75f614493b6d4b4a8a4b50'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'prope.pt')
HEADS, HEAD_DIM, VIEWS, GRID, PATCH = 1, 32, 2, (2, 3), 8
SKEW = 3.0  # pixels: K[0, 1]


def main() -> None:
    torch.set_default_dtype(torch.float64)
    spec = importlib.util.spec_from_file_location('prope_per_img_camera', FILE)
    prope = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prope)

    h, w = GRID
    height, width = h * PATCH, w * PATCH
    generator = torch.Generator().manual_seed(0)
    cam_to_world = stand_ins.random_poses(generator, VIEWS)[None]  # (B 1, V, 4, 4)
    K = torch.zeros(1, VIEWS, 3, 3)
    K[..., 0, 0], K[..., 1, 1] = torch.tensor([20.0, 14.0]), torch.tensor([18.0, 15.0])  # non-square pixels
    K[..., 0, 2], K[..., 1, 2] = torch.tensor([12.5, 10.0]), torch.tensor([7.0, 9.5])  # off-centre
    K[..., 2, 2] = 1.0
    K_skew = K.clone()
    K_skew[..., 0, 1] = SKEW
    q, k, v = (torch.randn(1, HEADS, VIEWS * h * w, HEAD_DIM, generator=generator) for _ in range(3))

    attention = prope.PropeDotProductAttention(
        HEAD_DIM, patches_x=w, patches_y=h, image_width=width, image_height=height
    )
    viewmats = torch.linalg.inv(cam_to_world)  # the reference's viewmats: world-to-camera
    record = {
        'reference': f'liruilong940607/prope@{COMMIT}:prope/per_img_camera.py:PropeDotProductAttention',
        'source_sha256': stand_ins.sha256(FILE),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'grid': list(GRID), 'patch_size': PATCH,
        'cam_to_world': cam_to_world, 'K': K, 'K_skew': K_skew, 'q': q, 'k': k, 'v': v,
    }  # fmt: skip
    for name, Ks in (('K', K), ('K_skew', K_skew), ('no_K', None)):
        with torch.no_grad():
            record[f'out_{name}'] = attention(q, k, v, viewmats, Ks)
            attention._precompute_and_cache_apply_fns(viewmats, Ks)
            record[f'logits_{name}'] = attention._apply_to_q(q) @ attention._apply_to_kv(k).transpose(-2, -1)
    assert torch.allclose(record['out_K'], record['out_K_skew'])  # the reference drops the skew
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)')


if __name__ == '__main__':
    main()
