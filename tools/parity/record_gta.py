"""Record GTA's attention (autonomousvision/gta) into tests/data/parity/gta.pt, which
tests/parity/test_parity_gta.py compares vispe's ``gta`` with (``so2='reference'``).

The reference is autonomousvision/gta at commit 1dcbd37d243ea7482e381f4a849a5c3d80866c41, run as it is from a local
copy:

- ``source/encoder.py``: ``ImprovedSRTEncoder.pre_compute_reps`` builds the representations of each token: the SE(3)
  block of its view (the inverse of ``input_transforms``, the world-to-camera extrinsics) and the SO(2) blocks of
  its patch position by ``make_SO2mats`` (``source/utils/gta.py``, frequencies 2 pi 2^(j - n), j = 1..n);
- ``source/utils/gta.py``: ``multihead_geometric_transform_attention`` transforms q, k and v, attends with the
  attention function of ``source/layers.py``'s ``Attention`` (softmax(q k^T / sqrt(d)) v) and transforms the output
  back, the translation scaled by ``Attention.trans_coeff`` (learned; set here and recorded);
- the patch coordinates are the reference datasets': ``make_2dcoord`` on the image's pixels, subsampled by
  ``source/utils/common.py``'s ``downsample`` (every 8th pixel from the 4th: the patch centres, (p + 0.5) / P).

The settings are the reference's ``runs/msn/GTA/gta/config.yaml`` at a smaller head: half of each head in SE(3)
blocks (``f_dims`` se3 = so2), ``max_freq_h = max_freq_w = 1``, values transformed. ``source/utils/wigner_d.py`` loads
``J_dense.pt`` (absent from the snapshot) when imported; it serves the SO(3) representation only, which this record
does not use, so it is stood in for (``stand_ins.py``); ``encoder.py`` imports ``ray2rotation`` from
``source/utils/gta.py``, which does not define it at this commit (it serves the option ``ray_to_se3``, not used
here): a stand-in is put under that name before the import. Commands:

    git --git-dir=<mirror of autonomousvision/gta> archive HEAD source | tar -x -C /tmp/ref/gta
    pip install --target /tmp/ref-einops --no-deps einops==0.8.1
    GTA_ROOT=/tmp/ref/gta PYTHONPATH=/tmp/ref-einops:. python tools/parity/record_gta.py

The file holds the cameras, q, k, v, the translation scale, and the reference's attention weights and outputs (with
values and output transformed, and with ``v_transform=False``, vispe's ``transform_values=False``), in float64.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stand_ins  # noqa: E402

ROOT = os.environ.get('GTA_ROOT', '/tmp/ref/gta')
COMMIT = '1dcbd37d243ea7482e381f4a849a5c3d80866c41'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'gta.pt')
HEADS, HEAD_DIM, VIEWS, GRID, STEPS = 2, 32, 2, (2, 3), 3  # 2^3 = 8 pixels per patch side
TRANSLATION_SCALE = 0.5


def main() -> None:
    torch.set_default_dtype(torch.float64)
    sys.path.insert(0, ROOT)
    stand_ins.install(['source.utils.wigner_d'])
    from source.utils import gta

    gta.ray2rotation = stand_ins.StandIn  # imported by encoder.py, defined nowhere at this commit; 'ray_to_se3' only
    from source.encoder import ImprovedSRTEncoder
    from source.layers import Attention
    from source.utils.common import downsample

    h, w = GRID
    pixels = (h << STEPS, w << STEPS)
    n = HEAD_DIM // 8  # frequencies per axis: so2 channels = 2 axes x n x 2
    args = {
        'so2': n,
        'max_freq_h': 1,
        'max_freq_w': 1,
        'f_dims': {'triv': 0, 'se3': HEAD_DIM // 2, 'so2': HEAD_DIM // 2},
    }
    attention = Attention(8, heads=HEADS, dim_head=HEAD_DIM, attn_args={'method': {'name': 'gta', 'args': args}})
    attention.trans_coeff.data.fill_(TRANSLATION_SCALE)

    generator = torch.Generator().manual_seed(0)
    cam_to_world = stand_ins.random_poses(generator, VIEWS)[None]  # (B 1, V, 4, 4)
    coord = downsample(torch.from_numpy(gta.make_2dcoord(*pixels)), STEPS).double()  # (h, w, 2): (row, col)
    extras = {
        'input_coord': coord.reshape(1, 1, h * w, 2).expand(1, VIEWS, h * w, 2),
        'input_transforms': torch.linalg.inv(cam_to_world),  # the reference's extrinsics, world-to-camera
    }
    ImprovedSRTEncoder.pre_compute_reps(None, args, extras)
    q, k, v = (torch.randn(1, HEADS, VIEWS * h * w, HEAD_DIM, generator=generator) for _ in range(3))
    with torch.no_grad():
        out, attn = gta.multihead_geometric_transform_attention(
            q, k, v, attn_fn=attention.attn_fn, f_dims=args['f_dims'], reps=extras,
            trans_coeff=attention.trans_coeff, v_transform=True,
        )  # fmt: skip
        out_plain_values, _ = gta.multihead_geometric_transform_attention(
            q, k, v, attn_fn=attention.attn_fn, f_dims=args['f_dims'], reps=extras,
            trans_coeff=attention.trans_coeff, v_transform=False,
        )  # fmt: skip
    record = {
        'reference': f'autonomousvision/gta@{COMMIT}:source/utils/gta.py:make_SO2mats,'
        'multihead_geometric_transform_attention',
        'source_sha256': stand_ins.sha256(os.path.join(ROOT, 'source', 'utils', 'gta.py')),
        'heads': HEADS, 'head_dim': HEAD_DIM, 'grid': list(GRID), 'patch_size': 1 << STEPS, 'so2_freqs': n,
        'translation_scale': TRANSLATION_SCALE, 'cam_to_world': cam_to_world, 'coord': coord,
        'q': q, 'k': k, 'v': v, 'attn': attn, 'out': out, 'out_plain_values': out_plain_values,
    }  # fmt: skip
    assert np.isfinite(out.numpy()).all()
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)')


if __name__ == '__main__':
    main()
