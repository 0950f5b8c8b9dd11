"""Mixed-resolution data: size policies (their properties), the shared-size batch sampler, the mixed-size collate,
Shapes2D rendered at drawn sizes, and the classifier / preprocessor plumbing of lists of images."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mmengine.dataset import DefaultSampler, default_collate
from mmengine.model import BaseDataPreprocessor
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from vispe.datasets import Shapes2D
from vispe.datasets.batching import SharedSizeBatchSampler, mixed_size_collate
from vispe.datasets.sizes import (
    FixedSize,
    NativeAspect,
    RandomAspect,
    SquareSizes,
    build_size_policy,
    draw_for,
    native_size,
)
from vispe.engine.config import load_config
from vispe.registry import DATA_SAMPLERS, FUNCTIONS, MODELS, SIZE_POLICIES
from vispe.tasks.classification import Classifier
from vispe.tasks.preprocess import MultiScaleDataPreprocessor

MIXEDRES = 'configs/vit/vit_tiny_shapes2d_mixedres_position.py'


# --- size policies ----------------------------------------------------------------------------------------------


def _scale_interval(grid: tuple[int, int], image_hw: tuple[int, int], patch: int) -> tuple[float, float]:
    """The scales r at which ceil(r * side / patch) gives ``grid`` on both sides: (lo, hi], empty when lo >= hi."""
    lo = max((g - 1) * patch / side for g, side in zip(grid, image_hw))
    hi = min(g * patch / side for g, side in zip(grid, image_hw))
    return lo, hi


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 4000),
    width=st.integers(1, 4000),
    patch=st.sampled_from([2, 4, 8, 14, 16, 32]),
    budget=st.integers(1, 1024),
)
def test_native_sizes_are_patch_multiples_within_the_budget_at_the_image_aspect(height, width, patch, budget) -> None:
    size = native_size((height, width), patch, budget)
    assert size[0] % patch == 0 and size[1] % patch == 0 and min(size) >= patch
    grid = (size[0] // patch, size[1] // patch)
    assert grid[0] * grid[1] <= budget or grid == (1, 1)
    # aspect ratio kept: one scale of the image gives this grid, each side rounded up to whole patches (a side at
    # one patch may stand for less: an image too elongated for the budget keeps one row or column)
    lo, hi = _scale_interval(grid, (height, width), patch)
    assert lo < hi or 1 in grid
    if 1 not in grid:  # the largest such grid: the next scale up (one more patch on some side) breaks the budget
        up = hi * (1 + 1e-9)
        bigger = [math.ceil(up * side / patch) for side in (height, width)]
        assert bigger[0] * bigger[1] > budget


def test_native_sizes_examples_and_orientation() -> None:
    assert native_size((100, 200), 16, 64) == (80, 160)  # 5 x 10 patches: twice as wide
    assert native_size((200, 100), 16, 64) == (160, 80)
    assert native_size((3, 3), 16, 64) == (128, 128)  # small images are scaled up to the budget
    assert native_size((2, 3000), 16, 64) == (16, 1024)  # too elongated: one row of 64 tokens
    assert native_size((480, 640), 16, 64) == native_size((4800, 6400), 16, 64)  # only the aspect ratio matters


def test_square_sizes_draw_every_patch_multiple_in_the_range() -> None:
    policy = SquareSizes(min_size=14, max_size=64, patch_size=8)
    assert policy.sides == (16, 24, 32, 40, 48, 56, 64)
    generator = torch.Generator().manual_seed(0)
    draws = {policy.draw(generator) for _ in range(400)}
    assert draws == {(s, s) for s in policy.sides}
    assert policy.size((24, 24), (3, 500)) == (24, 24)  # the image's own size does not matter
    with pytest.raises(ValueError, match='no multiple of the patch size 16 lies in'):
        SquareSizes(min_size=17, max_size=31, patch_size=16)


def test_fixed_size_and_token_budgets() -> None:
    assert FixedSize(32).sample((7, 9)) == (32, 32) and FixedSize((16, 48), patch_size=16).sample((1, 1)) == (16, 48)
    with pytest.raises(ValueError, match='not a multiple of the patch size 16'):
        FixedSize((16, 40), patch_size=16)
    generator = torch.Generator().manual_seed(0)
    listed = NativeAspect(patch_size=8, max_tokens=[16, 64])
    assert {listed.draw(generator) for _ in range(100)} == {16, 64}
    ranged = NativeAspect(patch_size=8, max_tokens=20, min_tokens=10)
    assert {ranged.draw(generator) for _ in range(500)} == set(range(10, 21))
    with pytest.raises(ValueError, match='min_tokens goes with an int max_tokens'):
        NativeAspect(patch_size=8, max_tokens=[16], min_tokens=4)
    with pytest.raises(ValueError, match='min_tokens must be in'):
        NativeAspect(patch_size=8, max_tokens=16, min_tokens=32)
    assert listed.largest() == 64 and ranged.largest() == 20 and FixedSize(8).largest() == (8, 8)
    assert SquareSizes(min_size=8, max_size=30, patch_size=8).largest() == (24, 24)


def test_random_aspect_draws_wide_and_tall_grids_within_the_budget() -> None:
    policy = RandomAspect(patch_size=4, max_tokens=64, max_ratio=3.0)
    generator = torch.Generator().manual_seed(0)
    sizes = [policy.sample((32, 32), generator) for _ in range(400)]
    for h, w in sizes:
        assert h % 4 == 0 and w % 4 == 0 and (h // 4) * (w // 4) <= 64
        assert 1 / 3 - 0.2 <= w / h <= 3 + 0.7  # the drawn ratio, within the rounding to whole patches
    ratios = [w / h for h, w in sizes]
    assert min(ratios) < 0.5 and max(ratios) > 2  # both wide and tall images are drawn
    assert sum((h // 4) * (w // 4) for h, w in sizes) / len(sizes) > 48  # near the budget: the largest grid fits
    assert policy.size(policy.largest(), (1, 1)) == (32, 32)
    with pytest.raises(ValueError, match='max_ratio is the widest aspect ratio'):
        RandomAspect(patch_size=4, max_tokens=64, max_ratio=0.5)


def test_policies_build_from_config_dicts() -> None:
    policy = build_size_policy(dict(type='NativeAspect', patch_size=4, max_tokens=64))
    assert isinstance(policy, NativeAspect) and SIZE_POLICIES.get('SquareSizes') is SquareSizes
    assert build_size_policy(None) is None and build_size_policy(policy) is policy
    with pytest.raises(TypeError, match='size_policy must be a dict config'):
        build_size_policy(64)


def test_a_key_gives_the_same_draw_and_no_key_draws_afresh() -> None:
    policy = SquareSizes(min_size=4, max_size=400, patch_size=4)
    assert len({draw_for(policy, 12345) for _ in range(20)}) == 1
    assert len({draw_for(policy, None) for _ in range(20)}) > 1


# --- Shapes2D at drawn sizes ------------------------------------------------------------------------------------


def test_shapes2d_renders_each_item_at_its_drawn_size() -> None:
    policy = dict(type='SquareSizes', min_size=8, max_size=64, patch_size=4)
    mixed = Shapes2D(num_samples=40, size_policy=policy, normalize=False)
    fixed = Shapes2D(num_samples=40, normalize=False)
    torch.manual_seed(0)
    items = [mixed[i] for i in range(40)]
    sides = {item['inputs'].shape[-1] for item in items}
    assert len(sides) > 3 and all(s % 4 == 0 and 8 <= s <= 64 for s in sides)
    for i, item in enumerate(items):  # the same scene and label, rendered (not resampled) at that size
        side = item['inputs'].shape[-1]
        assert item['inputs'].shape == (3, side, side) and item['labels'] == fixed[i]['labels']
        assert torch.equal(item['inputs'], fixed.render(i, side))
    keyed = [mixed[(i, 7)]['inputs'].shape for i in range(10)]  # one key (one batch): one size
    assert len(set(keyed)) == 1
    assert fixed[(3, 7)]['inputs'].shape == (3, 32, 32)  # no policy: the key changes nothing


# --- batch sampler and collate -----------------------------------------------------------------------------------


def test_shared_size_batch_sampler_pairs_each_batch_with_one_key() -> None:
    dataset = Shapes2D(num_samples=10, size_policy=dict(type='FixedSize', size=8))
    sampler = SharedSizeBatchSampler(DefaultSampler(dataset, shuffle=False), batch_size=4)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 3 and [len(b) for b in batches] == [4, 4, 2]
    assert [i for b in batches for i, _ in b] == list(range(10))
    assert all(len({key for _, key in b}) == 1 for b in batches) and len({b[0][1] for b in batches}) == 3
    dropping = SharedSizeBatchSampler(DefaultSampler(dataset, shuffle=False), batch_size=4, drop_last=True)
    assert len(dropping) == len(list(dropping)) == 2
    with pytest.raises(ValueError, match='Shapes2D has none: set its size_policy'):
        SharedSizeBatchSampler(DefaultSampler(Shapes2D(num_samples=4), shuffle=False), batch_size=2)
    with pytest.raises(ValueError, match='batch_size must be a positive int'):
        SharedSizeBatchSampler(range(4), batch_size=0)


def _items(*sizes: tuple[int, int]) -> list[dict]:
    return [{'inputs': torch.full((3, h, w), float(i)), 'labels': i} for i, (h, w) in enumerate(sizes)]


def test_mixed_size_collate_stacks_one_size_and_lists_mixed_sizes() -> None:
    same = _items((8, 8), (8, 8))
    stacked = mixed_size_collate(same)
    assert stacked['inputs'].shape == (2, 3, 8, 8) and torch.equal(stacked['labels'], default_collate(same)['labels'])
    mixed = mixed_size_collate(_items((8, 8), (4, 12), (8, 8)))
    assert isinstance(mixed['inputs'], list) and [x.shape[-2:] for x in mixed['inputs']] == [(8, 8), (4, 12), (8, 8)]
    assert [int(x[0, 0, 0]) for x in mixed['inputs']] == [0, 1, 2]  # batch order kept
    assert torch.equal(mixed['labels'], torch.tensor([0, 1, 2]))
    moved = BaseDataPreprocessor()(mixed)  # mmengine's default preprocessor moves a list item by item
    assert isinstance(moved['inputs'], list) and len(moved['inputs']) == 3
    with pytest.raises(TypeError, match="dict items with an 'inputs' key"):
        mixed_size_collate([torch.zeros(3)])


def test_the_registries_find_the_sampler_and_collate_by_name() -> None:
    assert DATA_SAMPLERS.get('SharedSizeBatchSampler') is SharedSizeBatchSampler
    assert FUNCTIONS.get('mixed_size_collate') is mixed_size_collate
    assert FUNCTIONS.get('default_collate') is default_collate  # mmengine's, through vispe's child registry


def _loader(options: dict) -> torch.utils.data.DataLoader:
    cfg = load_config(
        MIXEDRES, {'train_dataloader.dataset.num_samples': 24, 'train_dataloader.batch_size': 6, **options}
    )
    init_default_scope('vispe')
    return Runner.build_dataloader(cfg.train_dataloader, seed=0)


def test_the_mixedres_config_gives_one_square_size_per_batch() -> None:
    loader = _loader({})
    # mmengine's DistSamplerSeedHook reaches the index sampler through the batch sampler: shuffles change per epoch
    assert isinstance(loader.batch_sampler, SharedSizeBatchSampler) and isinstance(
        loader.batch_sampler.sampler, DefaultSampler
    )
    shapes = [batch['inputs'].shape for batch in loader]
    assert len(shapes) == 4 and all(len(s) == 4 and s[0] == 6 and s[-1] == s[-2] and s[-1] % 4 == 0 for s in shapes)
    assert all(16 <= s[-1] <= 64 for s in shapes)


def test_without_the_batch_sampler_each_image_draws_its_own_size() -> None:
    batches = list(_loader({'train_dataloader.batch_sampler': None}))
    assert any(isinstance(b['inputs'], list) for b in batches)  # 6 draws among 13 sides: a repeat is unlikely
    for batch in batches:
        images = list(batch['inputs'])
        assert batch['labels'].shape == (6,) and all(
            x.shape[-1] == x.shape[-2] and x.shape[-1] % 4 == 0 for x in images
        )


# --- model plumbing ----------------------------------------------------------------------------------------------


class _Recorder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(1, 3)
        self.seen: list = []

    def forward(self, inputs):
        self.seen.append(inputs)
        batch = len(inputs)
        return self.head(torch.ones(batch, 1))


class _RecordingClassifier(Classifier):
    def build_backbone(self, cfg):
        return _Recorder()


def test_the_classifier_hands_a_list_of_images_to_its_backbone() -> None:
    model = _RecordingClassifier(backbone={})
    batch = model.data_preprocessor(mixed_size_collate(_items((8, 8), (4, 12))), True)
    losses = model(**batch, mode='loss')
    assert torch.isfinite(losses['loss'])
    assert isinstance(model.backbone.seen[-1], list) and len(model.backbone.seen[-1]) == 2
    assert len(model(**batch, mode='predict')) == 2


def test_multiscale_preprocessor_refuses_mixed_size_batches_in_training() -> None:
    preprocessor = MultiScaleDataPreprocessor(sizes=(16,))
    batch = mixed_size_collate(_items((8, 8), (4, 12)))
    with pytest.raises(TypeError, match='MultiScaleDataPreprocessor resizes a stacked'):
        preprocessor(batch, training=True)
    assert isinstance(preprocessor(batch, training=False)['inputs'], list)  # evaluation: left as it is


def test_an_image_classifier_trains_on_a_mixed_size_batch_end_to_end() -> None:
    init_default_scope('vispe')
    model = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                model_name='vit_tiny_patch16_224', img_size=32, patch_size=4, embed_dim=32, depth=1, num_heads=2,
                num_classes=27, encoding='rope_mixed',
            ),
        )
    )  # fmt: skip
    items = [Shapes2D(num_samples=4, image_size=size)[i] for i, size in enumerate([16, 32, (16, 48), 24])]
    batch = model.data_preprocessor(mixed_size_collate(items), True)
    assert isinstance(batch['inputs'], list)
    logits = model(**batch, mode='tensor')
    assert logits.shape == (4, 27)
    model(**batch, mode='loss')['loss'].backward()
    assert model.backbone.patch_embed.proj.weight.grad is not None
    for image, row in zip(batch['inputs'], logits):  # each image of the list gets the logits it gets alone
        torch.testing.assert_close(row, model(image[None], mode='tensor')[0], rtol=1e-4, atol=1e-4)


def test_a_wrapped_data_set_with_a_policy_takes_shared_sizes() -> None:
    from vispe.datasets import TransformedDataset

    inner = Shapes2D(num_samples=6, size_policy=dict(type='SquareSizes', min_size=8, max_size=64, patch_size=4))
    wrapped = TransformedDataset(inner, transforms=[])
    batches = list(SharedSizeBatchSampler(DefaultSampler(wrapped, shuffle=False), batch_size=3))
    for batch in batches:
        assert len({wrapped[index]['inputs'].shape for index in batch}) == 1
