"""Each check runs once per model build, at the outermost builder (``vispe.checks``); outside a build, always."""

import pytest

import vispe
from vispe.backbones import DiT
from vispe.checks import once_per_build, one_build
from vispe.encodings import base


def _count_heads_checks(monkeypatch, build) -> int:
    """How often the body of check_heads runs during ``build()``."""
    calls = []
    check = base.check_heads.__wrapped__  # the check itself, under once_per_build

    @once_per_build('owner')
    def counted(dim, num_heads, owner):
        calls.append(owner)
        check(dim, num_heads, owner)

    for module in (
        'vispe.encodings.base',
        'vispe.encodings.build',
        'vispe.attention',
        'vispe.backbones.base',
        'vispe.backbones.common',
        'vispe.encodings.irpe',
        'vispe.encodings.lepe',
    ):
        monkeypatch.setattr(f'{module}.check_heads', counted)
    build()
    return len(calls)


@pytest.mark.parametrize(
    'build',
    [
        lambda: vispe.create_model('vit_tiny_patch16_224', encoding=['irpe', 'lepe'], depth=3),
        lambda: DiT(depth=3, embed_dim=64, num_heads=4, encoding='irpe'),
    ],
)
def test_heads_are_checked_once_per_build(monkeypatch, build):
    assert _count_heads_checks(monkeypatch, build) == 1


def test_the_outermost_builder_names_itself_and_standalone_layers_still_check():
    with pytest.raises(ValueError, match='^DiT: num_heads'):
        DiT(depth=2, embed_dim=64, num_heads=5, encoding='irpe')
    with pytest.raises(ValueError, match='^Attention: num_heads'):
        vispe.Attention(64, 5)
    with pytest.raises(ValueError, match='^irpe: num_heads'):
        vispe.build_encoding('irpe', dim=64, num_heads=5)


def test_a_check_is_skipped_only_for_arguments_that_passed():
    runs = []

    @once_per_build('owner')
    def positive(value, owner):
        runs.append(value)
        if not value > 0:
            raise ValueError(f'{owner}: {value}')
        return value

    with one_build():
        assert positive(1, 'a') == positive(1, 'b') == 1
        positive(1.0, 'c')  # another type: checked again
        with pytest.raises(ValueError, match='d: -1'):
            positive(-1, 'd')
        with pytest.raises(ValueError, match='e: -1'):
            positive(-1, 'e')  # a failed check is never recorded
        with one_build():  # a nested builder joins the build
            positive(1, 'f')
    positive(1, 'g')  # outside a build: always checked
    assert runs == [1, 1.0, -1, -1, 1]
