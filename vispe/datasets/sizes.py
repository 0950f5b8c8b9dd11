"""Size policies (``SIZE_POLICIES``): the (H, W) of each image in mixed-resolution training (FlexiViT, NaFlex).
``draw(generator)`` gives a hashable draw, ``size(draw, image_hw)`` a size in whole patches. A data set draws per item
from the global RNG, or from ``key`` for an index ``(i, key)``: one draw per batch."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import torch
from timm.data.naflex_transforms import get_image_size_for_seq

from vispe.registry import SIZE_POLICIES

HW = tuple[int, int]
#: a data set index with the key of its batch's size draw, as ``SharedSizeBatchSampler`` yields it
SizedIndex = tuple[int, int]


def as_pair(size: int | Sequence[int], what: str = 'size') -> HW:
    """``size`` (int or (H, W)) as a (H, W) pair of positive ints, else ValueError naming ``what``."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f'{what} must be a positive int or an (H, W) pair of them, got {size!r}')
    return int(pair[0]), int(pair[1])


def _positive_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'{what} must be a positive int, got {value!r}')
    return value


def _randint(low: int, high: int, generator: torch.Generator | None) -> int:
    return int(torch.randint(low, high + 1, (), generator=generator))


class SizePolicy:
    """Base class: ``draw`` then ``size``; ``keeps_aspect``: sizes follow the image's aspect ratio."""

    patch_size: int | None = None
    keeps_aspect = False

    def draw(self, generator: torch.Generator | None = None) -> Hashable:
        raise NotImplementedError

    def size(self, draw: Any, image_hw: HW) -> HW:
        raise NotImplementedError

    def sample(self, image_hw: HW, generator: torch.Generator | None = None) -> HW:
        return self.size(self.draw(generator), image_hw)

    def nominal_side(self) -> int:
        """A typical side in pixels, for augmentations whose strength is in pixels."""
        raise NotImplementedError

    def largest(self) -> Hashable:
        """The draw of the largest sizes: a deterministic choice, for inference."""
        raise NotImplementedError


@SIZE_POLICIES.register_module()
class FixedSize(SizePolicy):
    """Every image at one size.

    Args:
        size: int (square) or (H, W).
        patch_size: when given, both sides must be multiples of it; None: not checked.
    """

    def __init__(self, size: int | Sequence[int], patch_size: int | None = None) -> None:
        self.hw = as_pair(size)
        if patch_size is not None:
            self.patch_size = _positive_int(patch_size, 'patch_size')
            if self.hw[0] % patch_size or self.hw[1] % patch_size:
                raise ValueError(f'FixedSize {self.hw} is not a multiple of the patch size {patch_size}')

    def draw(self, generator: torch.Generator | None = None) -> HW:
        return self.hw

    def size(self, draw: HW, image_hw: HW) -> HW:
        return draw

    def nominal_side(self) -> int:
        return min(self.hw)

    def largest(self) -> HW:
        return self.hw

    def __repr__(self) -> str:
        return f'FixedSize(size={self.hw}, patch_size={self.patch_size})'


@SIZE_POLICIES.register_module()
class SquareSizes(SizePolicy):
    """FlexiViT's random square size: a side drawn uniformly among the multiples of ``patch_size`` in the range.

    Args:
        min_size: smallest side in pixels.
        max_size: largest side in pixels; a multiple of ``patch_size`` must lie in the range.
        patch_size: the model's patch size in pixels.
    """

    def __init__(self, min_size: int, max_size: int, patch_size: int) -> None:
        self.patch_size = _positive_int(patch_size, 'patch_size')
        _positive_int(min_size, 'min_size')
        _positive_int(max_size, 'max_size')
        self.min_size, self.max_size = min_size, max_size
        self.sides = tuple(range(math.ceil(min_size / patch_size) * patch_size, max_size + 1, patch_size))
        if not self.sides:
            raise ValueError(
                f'SquareSizes: no multiple of the patch size {patch_size} lies in [{min_size}, {max_size}]'
            )

    def draw(self, generator: torch.Generator | None = None) -> HW:
        side = self.sides[_randint(0, len(self.sides) - 1, generator)]
        return side, side

    def size(self, draw: HW, image_hw: HW) -> HW:
        return draw

    def nominal_side(self) -> int:
        return self.sides[len(self.sides) // 2]

    def largest(self) -> HW:
        return self.sides[-1], self.sides[-1]

    def __repr__(self) -> str:
        return f'SquareSizes(min_size={self.min_size}, max_size={self.max_size}, patch_size={self.patch_size})'


def native_size(image_hw: HW, patch_size: int, max_tokens: int) -> HW:
    """(H, W) of the largest patch grid of ``image_hw``'s aspect ratio with at most ``max_tokens`` tokens (timm's)."""
    height, width = image_hw
    if height <= 0 or width <= 0:
        raise ValueError(f'image size must be positive, got {image_hw}')
    scale = math.sqrt(max_tokens * patch_size * patch_size / (height * width))
    _, hw = get_image_size_for_seq((height * scale, width * scale), patch_size, max_tokens)  # type: ignore[arg-type]
    return int(hw[0]), int(hw[1])


@SIZE_POLICIES.register_module()
class NativeAspect(SizePolicy):
    """NaFlex: each image keeps its aspect ratio, at the largest patch grid within the drawn token budget.

    Args:
        patch_size: the model's patch size in pixels.
        max_tokens: the token budget (patches, prefix tokens not counted), or a list of budgets drawn uniformly.
        min_tokens: with an int ``max_tokens``, draw the budget uniformly in [min_tokens, max_tokens].
    """

    keeps_aspect = True
    patch_size: int

    def __init__(self, patch_size: int, max_tokens: int | Sequence[int], min_tokens: int | None = None) -> None:
        self.patch_size = _positive_int(patch_size, 'patch_size')
        if isinstance(max_tokens, int):
            _positive_int(max_tokens, 'max_tokens')
            if min_tokens is None:
                self.budgets: tuple[int, ...] = (max_tokens,)
            else:
                if not 1 <= _positive_int(min_tokens, 'min_tokens') <= max_tokens:
                    raise ValueError(f'min_tokens must be in [1, max_tokens={max_tokens}], got {min_tokens}')
                self.budgets = tuple(range(min_tokens, max_tokens + 1))
        else:
            if min_tokens is not None:
                raise ValueError('min_tokens goes with an int max_tokens (a range of budgets), not a list of them')
            self.budgets = tuple(_positive_int(t, 'each of max_tokens') for t in max_tokens)
            if not self.budgets:
                raise ValueError('max_tokens is an empty list: give at least one token budget')
        self.max_tokens, self.min_tokens = max_tokens, min_tokens

    def draw(self, generator: torch.Generator | None = None) -> int:
        return self.budgets[_randint(0, len(self.budgets) - 1, generator)]

    def size(self, draw: int, image_hw: HW) -> HW:
        return native_size(image_hw, self.patch_size, draw)

    def nominal_side(self) -> int:
        return int(math.sqrt(max(self.budgets))) * self.patch_size

    def largest(self) -> int:
        return max(self.budgets)

    def __repr__(self) -> str:
        return (
            f'NativeAspect(patch_size={self.patch_size}, max_tokens={self.max_tokens!r}, '
            f'min_tokens={self.min_tokens!r})'
        )


@SIZE_POLICIES.register_module()
class RandomAspect(NativeAspect):
    """NaFlex's rule at an aspect ratio W / H drawn log-uniformly in [1 / ``max_ratio``, ``max_ratio``] (scenes).

    Args:
        patch_size: the model's patch size in pixels.
        max_tokens: the token budget, or a list of budgets drawn uniformly.
        min_tokens: with an int ``max_tokens``, draw the budget uniformly in [min_tokens, max_tokens].
        max_ratio: the widest (and, inverted, the tallest) aspect ratio drawn, >= 1.
    """

    keeps_aspect = False

    def __init__(
        self,
        patch_size: int,
        max_tokens: int | Sequence[int],
        min_tokens: int | None = None,
        max_ratio: float = 3.0,
    ) -> None:
        super().__init__(patch_size, max_tokens, min_tokens)
        if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not max_ratio >= 1:
            raise ValueError(f'RandomAspect: max_ratio is the widest aspect ratio W / H, >= 1; got {max_ratio!r}')
        self.max_ratio = float(max_ratio)

    def draw(self, generator: torch.Generator | None = None) -> tuple[int, float]:  # type: ignore[override]
        budget = super().draw(generator)
        u = float(torch.rand((), generator=generator))
        return budget, math.exp((2 * u - 1) * math.log(self.max_ratio))

    def size(self, draw: tuple[int, float], image_hw: HW) -> HW:  # type: ignore[override]
        budget, ratio = draw
        return native_size((1000, max(1, round(1000 * ratio))), self.patch_size, budget)

    def largest(self) -> tuple[int, float]:  # type: ignore[override]
        return max(self.budgets), 1.0

    def __repr__(self) -> str:
        return (
            f'RandomAspect(patch_size={self.patch_size}, max_tokens={self.max_tokens!r}, '
            f'min_tokens={self.min_tokens!r}, max_ratio={self.max_ratio})'
        )


def build_size_policy(policy: SizePolicy | dict | None) -> SizePolicy | None:
    if policy is None or isinstance(policy, SizePolicy):
        return policy
    if isinstance(policy, dict):
        # load_config drops the ``_delete_`` markers --cfg-options leaves on new keys (engine.config.merge_options);
        # a config saved in a checkpoint before it did may still carry one here
        return SIZE_POLICIES.build({k: v for k, v in policy.items() if k != '_delete_'})
    raise TypeError(
        'size_policy must be a dict config (type=FixedSize / SquareSizes / NativeAspect / RandomAspect), got '
        f'{policy!r}'
    )


def split_index(index: int | SizedIndex | Sequence[int]) -> tuple[int, int | None]:
    """(item index, key of its batch's size draw or None) of a data set index: ``i`` or ``(i, key)``."""
    if isinstance(index, (tuple, list)):
        if len(index) != 2:
            raise IndexError(f'a sized index is (index, key), got {index!r}')
        return int(index[0]), int(index[1])
    return int(index), None  # type: ignore[arg-type]


def draw_for(policy: SizePolicy, key: int | None) -> Hashable:
    """``policy``'s draw for an item: from the global RNG (``key`` None), or from a generator seeded with ``key``."""
    generator = None if key is None else torch.Generator().manual_seed(key)
    return policy.draw(generator)


def item_size(policy: SizePolicy | None, image_hw: HW, key: int | None = None, default: HW | None = None) -> HW:
    """The (H, W) an item of ``image_hw`` pixels is served at: ``policy``'s, else ``default``, else ``image_hw``."""
    if policy is None:
        return default or image_hw
    return policy.size(draw_for(policy, key), image_hw)


__all__ = [
    'FixedSize',
    'NativeAspect',
    'RandomAspect',
    'SizePolicy',
    'SizedIndex',
    'SquareSizes',
    'as_pair',
    'build_size_policy',
    'draw_for',
    'item_size',
    'native_size',
    'split_index',
]
