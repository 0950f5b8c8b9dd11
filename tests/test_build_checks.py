"""A model's arguments are checked where they are used, and the outermost builder checks first: an error names the
model the user built, and a layer built on its own still checks its own arguments."""

import pytest
import torch

import vispe
from vispe.backbones import DiT, PointTransformer, VideoTransformer
from vispe.checks import one_build

BUILDERS = {
    'vit': (lambda h: vispe.create_model('vit_tiny_patch16_224', encoding='irpe', num_heads=h), 'vit_tiny'),
    'dit': (lambda h: DiT(depth=2, embed_dim=64, num_heads=h, encoding='irpe'), 'DiT'),
    'video': (lambda h: VideoTransformer(num_classes=3, embed_dim=64, depth=1, num_heads=h), 'VideoTransformer'),
    'point': (lambda h: PointTransformer(num_classes=3, embed_dim=64, depth=1, num_heads=h), 'PointTransformer'),
}


@pytest.mark.parametrize('kind', sorted(BUILDERS))
def test_a_bad_head_count_is_refused_naming_the_model_built(kind):
    build, owner = BUILDERS[kind]
    with pytest.raises(ValueError, match=f'^{owner}.*num_heads'):
        build(5)
    assert isinstance(build(4), torch.nn.Module)


def test_standalone_layers_still_check():
    with pytest.raises(ValueError, match='^Attention: num_heads'):
        vispe.Attention(64, 5)
    with pytest.raises(ValueError, match='^irpe: num_heads'):
        vispe.build_encoding('irpe', dim=64, num_heads=5)


def test_the_former_build_scope_is_a_deprecated_no_op():
    with pytest.warns(DeprecationWarning, match='one_build'):

        @one_build()
        def build(x):
            return x + 1

    assert build(1) == 2
