"""Record Point-MAE's positional MLP, added before every block, into tests/data/parity/point_mlp.pt, which
tests/parity/test_parity_point_mae.py compares vispe's ``point_mlp`` with.

The reference is Pang-Yatian/Point-MAE at commit 7445a68068d707da6d959b66773bfef84c4e3e32, ``models/Point_MAE.py``:
the ``pos_embed`` MLP (Linear(3, 128) - GELU - Linear(128, D)) of the group centres, which ``TransformerEncoder``
adds to the tokens before each of its blocks, in two models:

- ``MaskTransformer`` (the pretraining encoder, no cls token), run by its ``forward(neighborhood, center,
  noaug=True)`` (nothing masked);
- ``PointTransformer`` (the classifier), run by its ``forward(pts)``: a cls token with a learned ``cls_pos`` of its
  own in front of the group tokens. Its FPS + kNN grouping (``group_divider``, CUDA kernels) is replaced on the
  instance by a module returning the same neighbourhoods and centres as the first model's, so both see one input.

Forward hooks on each model's ``blocks`` (the ``TransformerEncoder``) record the tokens that enter it and what it
returns. Both models run as they are, in float64, with depth 2, width 8 and 2 heads, and every weight drawn here
(rounded to float32, so that the float32 copy in the record holds them exactly), shared by the two models.

Point-MAE's module imports three CUDA extensions it does not use here (``knn_cuda``, ``pointnet2_ops`` through
utils/misc.py, and ``chamfer`` through extensions/chamfer_dist); the recorder puts empty stand-ins for exactly those
into ``sys.modules`` before importing it. From a local copy of the repository (it imports timm, one of vispe's
dependencies, and easydict):

    git clone https://github.com/Pang-Yatian/Point-MAE /tmp/ref/Point-MAE
    git -C /tmp/ref/Point-MAE checkout 7445a68068d707da6d959b66773bfef84c4e3e32
    pip install --target /tmp/ref-deps --no-deps easydict==1.14
    PYTHONPATH=/tmp/ref/Point-MAE:/tmp/ref-deps python tools/parity/record_point_mlp.py
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import os
import sys
import types
import warnings

import torch
from easydict import EasyDict
from torch import nn


def stand_in(name: str, **attrs) -> None:
    """An empty module ``name`` with ``attrs`` in sys.modules: an import Point-MAE makes but does not use here."""
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class Unused:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError('a stand-in for a CUDA extension of Point-MAE was called')


stand_in('knn_cuda', KNN=Unused)
stand_in('pointnet2_ops')
stand_in('pointnet2_ops.pointnet2_utils')
sys.modules['pointnet2_ops'].pointnet2_utils = sys.modules['pointnet2_ops.pointnet2_utils']
stand_in('chamfer')

with warnings.catch_warnings():  # Point_MAE.py imports timm's deprecated module paths
    warnings.simplefilter('ignore', FutureWarning)
    from models import Point_MAE as point_mae  # noqa: E402  (Point-MAE's models/Point_MAE.py)

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'point_mlp.pt')
COMMIT = '7445a68068d707da6d959b66773bfef84c4e3e32'
DIM, DEPTH, HEADS, BATCH, GROUPS, GROUP_SIZE = 8, 2, 2, 2, 5, 4


class FixedGroups(nn.Module):
    """Stands in for the classifier's ``group_divider`` (FPS + kNN on CUDA): returns the given groups."""

    def __init__(self, neighborhood: torch.Tensor, center: torch.Tensor) -> None:
        super().__init__()
        self.neighborhood, self.center = neighborhood, center

    def forward(self, pts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.neighborhood, self.center


def recording(module: nn.Module, seen: dict, key: str) -> None:
    """Record the (x, pos) ``module`` is called with and what it returns under ``key``."""
    module.register_forward_pre_hook(lambda m, args: seen.__setitem__(key + '_in', args))
    module.register_forward_hook(lambda m, args, out: seen.__setitem__(key + '_out', out))


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    model = dict(trans_dim=DIM, depth=DEPTH, drop_path_rate=0.0, num_heads=HEADS, encoder_dims=DIM)
    with contextlib.redirect_stdout(io.StringIO()):  # they print their configs
        encoder = point_mae.MaskTransformer(
            EasyDict(transformer_config=EasyDict(mask_ratio=0.6, mask_type='rand', **model))
        )
        classifier = point_mae.PointTransformer(EasyDict(cls_dim=4, group_size=GROUP_SIZE, num_group=GROUPS, **model))
    encoder, classifier = encoder.double().eval(), classifier.double().eval()
    with torch.no_grad():
        for p in encoder.parameters():  # every weight visible in the outputs, and exact in float32
            p.copy_((torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3).float())
        for name in ('cls_token', 'cls_pos'):
            getattr(classifier, name).copy_((torch.randn(1, 1, DIM, generator=generator) * 0.5).double())
    missing, _ = classifier.load_state_dict(encoder.state_dict(), strict=False)
    assert all(k.startswith(('cls_', 'cls_head_finetune')) for k in missing), missing
    neighborhood = torch.randn(BATCH, GROUPS, GROUP_SIZE, 3, generator=generator, dtype=torch.float64) * 0.1
    center = torch.randn(BATCH, GROUPS, 3, generator=generator, dtype=torch.float64)
    classifier.group_divider = FixedGroups(neighborhood, center)
    seen: dict = {}
    recording(encoder.blocks, seen, 'encoder')
    recording(classifier.blocks, seen, 'classifier')
    with torch.no_grad():
        encoder(neighborhood, center, noaug=True)
        classifier(torch.zeros(BATCH, 16, 3, dtype=torch.float64))
    tokens = seen['encoder_in'][0]  # (B, G, D): the group tokens, all visible
    assert torch.equal(seen['classifier_in'][0][:, 1:], tokens)  # the same tokens behind the classifier's cls
    weights = lambda module: {k: v.float() for k, v in module.state_dict().items()}  # noqa: E731
    source = ''.join(
        inspect.getsource(c)
        for c in (point_mae.MaskTransformer, point_mae.PointTransformer, point_mae.TransformerEncoder, point_mae.Block)
    )
    record = {
        'reference': f'Pang-Yatian/Point-MAE@{COMMIT}:models/Point_MAE.py:MaskTransformer.pos_embed',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'depth': DEPTH, 'heads': HEADS, 'center': center, 'tokens': tokens,
        'pos_embed': weights(encoder.pos_embed), 'blocks': [weights(b) for b in encoder.blocks.blocks],
        'cls_token': classifier.cls_token.detach().float(), 'cls_pos': classifier.cls_pos.detach().float(),
        'encoder_out': seen['encoder_out'], 'classifier_out': seen['classifier_out'],
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
