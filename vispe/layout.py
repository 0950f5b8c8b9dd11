"""Batches of images of different sizes: how their tokens sit in a (B, T, D) tensor (``TokenLayout``).

Each image gets one segment of a row: its P prefix tokens, then its h*w patch tokens, row-major. ``pad``: one image
per row (NaFlex); ``pack``: first-fit into rows (NaViT). Attention runs within a segment (``attn_mask``); padding sees
only padding. Prefix tokens sit inside the rows (``patch_mask`` is False there) and get no position."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

MODES = ('pad', 'pack')


@dataclass(frozen=True)
class GridGroup:
    """The images of one grid size and ``index`` (n, h*w), the flat ``row * T + column`` indices of their patches."""

    grid: tuple[int, int]
    images: tuple[int, ...]
    index: torch.Tensor


@dataclass(eq=False)
class TokenLayout:
    """Where each image of a mixed batch sits; build it with ``make_layout``. Derived tensors are cached per device.

    Attributes (per image, in input order): ``grids`` (h, w), ``rows`` its row, ``slots`` its place among its row's
    images, ``starts`` where its segment begins; ``num_rows`` B, ``prefix_per_image`` P, ``length`` T."""

    grids: tuple[tuple[int, int], ...]
    rows: tuple[int, ...]
    slots: tuple[int, ...]
    starts: tuple[int, ...]
    num_rows: int
    slots_per_row: int
    prefix_per_image: int
    length: int
    _tensors: dict[tuple[str, torch.device], object] = field(default_factory=dict, repr=False)

    @property
    def num_images(self) -> int:
        return len(self.grids)

    @property
    def key(self) -> Hashable:
        """Names the layout (every position table derived from it is a function of this)."""
        return ('layout', self.grids, self.rows, self.starts, self.prefix_per_image, self.length)

    @property
    def distinct_grids(self) -> tuple[tuple[int, int], ...]:
        """The grid sizes present, in order of first appearance; ``grid_index`` indexes into them."""
        return tuple(dict.fromkeys(self.grids))

    def real_tokens(self) -> int:
        """Patch tokens of the images (padding and prefix excluded)."""
        return sum(h * w for h, w in self.grids)

    def _cached(self, name: str, device: torch.device | None, build):
        key = (name, torch.device(device) if device is not None else torch.device('cpu'))
        if key not in self._tensors:
            self._tensors[key] = build(key[1])
        return self._tensors[key]

    # --- flat (row * T + column) indices of the tokens ---------------------------------------------------------
    def _per_cell(self) -> dict[str, torch.Tensor]:
        """Every image's patch cells as flat tensors: ``image``, ``cell``, ``h``, ``w``, ``token`` (flat index)."""

        def build(_: torch.device) -> dict[str, torch.Tensor]:
            h = torch.tensor([g[0] for g in self.grids])
            w = torch.tensor([g[1] for g in self.grids])
            sizes = h * w
            image = torch.repeat_interleave(torch.arange(self.num_images), sizes)
            first = torch.cumsum(sizes, 0) - sizes  # where each image's cells begin in the flat list
            cell = torch.arange(int(sizes.sum())) - first[image]
            base = torch.tensor(self.rows) * self.length + torch.tensor(self.starts) + self.prefix_per_image
            return dict(image=image, cell=cell, h=h[image], w=w[image], token=base[image] + cell)

        return self._cached('cells', None, build)

    def _prefix_tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(n * P,) flat indices of every image's prefix tokens (input order, P each) and their images."""
        P = self.prefix_per_image
        image = torch.arange(self.num_images).repeat_interleave(P)
        base = torch.tensor(self.rows) * self.length + torch.tensor(self.starts)
        return base[image] + torch.arange(P).repeat(self.num_images), image

    def _patch_tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        cells = self._per_cell()
        return cells['token'], cells['image']

    # --- per-token tensors over the T tokens of each row -------------------------------------------------------
    def _token_tables(self, device: torch.device) -> dict[str, torch.Tensor]:
        B, T = self.num_rows, self.length
        cells = self._per_cell()
        token, cell, h, w, image = cells['token'], cells['cell'], cells['h'], cells['w'], cells['image']
        ids = {g: i for i, g in enumerate(self.distinct_grids)}
        grid_of_image = torch.tensor([ids[g] for g in self.grids])
        coords = torch.zeros(B * T, 2).index_copy_(0, token, torch.stack([cell // w, cell % w], -1).float())
        token_grid = torch.ones(B * T, 2).index_copy_(0, token, torch.stack([h, w], -1).float())
        grid_index = torch.full((B * T,), -1, dtype=torch.long).index_copy_(0, token, grid_of_image[image])
        token_index = torch.full((B * T,), -1, dtype=torch.long).index_copy_(0, token, cell)
        tables = dict(
            coords=coords.reshape(B, T, 2),
            token_grid=token_grid.reshape(B, T, 2),
            grid_index=grid_index.reshape(B, T),
            token_index=token_index.reshape(B, T),
        )
        return {k: v.to(device) for k, v in tables.items()}

    def token_tables(self, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """Per token: ``coords`` (row, col) and ``token_grid`` (h, w) in its image (0 and 1 on prefix and padding),
        ``grid_index`` into ``distinct_grids`` and ``token_index`` (its cell), -1 on prefix and padding."""
        return self._cached('tokens', device, self._token_tables)

    def coords(self, device: torch.device | None = None) -> torch.Tensor:
        return self.token_tables(device)['coords']

    def token_grid(self, device: torch.device | None = None) -> torch.Tensor:
        return self.token_tables(device)['token_grid']

    def patch_mask(self, device: torch.device | None = None) -> torch.Tensor:
        """(B, T) bool: True on the images' patch tokens, False on their prefix tokens and on padding."""
        return self._cached('patch_mask', device, lambda dev: self.token_tables(dev)['grid_index'] >= 0)

    def table_index(self, device: torch.device | None = None) -> torch.Tensor:
        """(B, T) long: each token's row in the ``distinct_grids``' tables, concatenated, plus a last row of none."""

        def build(dev: torch.device) -> torch.Tensor:
            tokens = self.token_tables(dev)
            sizes = torch.tensor([0] + [h * w for h, w in self.distinct_grids], device=dev)
            offsets = sizes.cumsum(0)
            grid, cell = tokens['grid_index'], tokens['token_index']
            return torch.where(grid >= 0, offsets[grid.clamp_min(0)] + cell, offsets[-1])

        return self._cached('table_index', device, build)

    def grid_cells(self, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, 2) (row, col) and (n, 2) (h, w) of the ``distinct_grids``' cells: ``table_index``'s rows but the last."""

        def build(dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
            coords, sizes = [], []
            for h, w in self.distinct_grids:
                cell = torch.arange(h * w, device=dev)
                coords.append(torch.stack([cell // w, cell % w], -1).float())
                sizes.append(torch.tensor([[float(h), float(w)]], device=dev).expand(h * w, 2))
            return torch.cat(coords), torch.cat(sizes)

        return self._cached('cells_of_grids', device, build)

    def segments(self, device: torch.device | None = None) -> torch.Tensor:
        """(B, T) long: each token's slot in its row (prefix tokens included), -1 for padding."""

        def build(dev: torch.device) -> torch.Tensor:
            slots = torch.tensor(self.slots)
            seg = torch.full((self.num_rows * self.length,), -1, dtype=torch.long)
            for index, image in (self._prefix_tokens(), self._patch_tokens()):
                seg.index_copy_(0, index, slots[image])
            return seg.reshape(self.num_rows, self.length).to(dev)

        return self._cached('segments', device, build)

    def attn_mask(self, device: torch.device | None = None) -> torch.Tensor:
        """(B, 1, T, T) bool, True where query and key share a segment: SDPA's boolean ``attn_mask``."""

        def build(dev: torch.device) -> torch.Tensor:
            seg = self.segments(dev)
            return (seg[:, :, None] == seg[:, None, :]).unsqueeze(1)

        return self._cached('mask', device, build)

    def block_mask(self, device: torch.device | None = None) -> Any:
        """``attn_mask`` as FlexAttention's ``BlockMask``, built once per layout and device."""

        def build(dev: torch.device) -> Any:
            from torch.nn.attention.flex_attention import create_block_mask

            seg = self.segments(dev)

            def same_segment(b, h, q_idx, kv_idx):
                return seg[b, q_idx] == seg[b, kv_idx]

            return create_block_mask(same_segment, self.num_rows, None, self.length, self.length, device=str(dev))

        return self._cached('block_mask', device, build)

    def prepare(self, device: torch.device | None = None, block_mask: bool = False) -> None:
        """Build what the layers read before the blocks run, so that blocks compiled one by one do not recompile."""
        self.token_tables(device)
        self.patch_mask(device)
        self.table_index(device)
        self.grid_cells(device)
        self.attn_mask(device)
        self.grouped_patch_index(device)
        if block_mask:
            self.block_mask(device)

    def segment_values(self, values: Sequence[float], device: torch.device | None = None) -> torch.Tensor:
        """(B, T) float32: each token's entry of the per-image ``values``, 1 on padding."""
        per_image = torch.tensor([float(v) for v in values])
        out = torch.ones(self.num_rows * self.length)
        for index, image in (self._prefix_tokens(), self._patch_tokens()):
            out.index_copy_(0, index, per_image[image])
        return out.reshape(self.num_rows, self.length).to(device)

    # --- per-image access ---------------------------------------------------------------------------------------
    def patch_index(self, image: int) -> tuple[int, slice]:
        """(row, columns) of image ``image``'s patch tokens in the (B, T, ...) tokens."""
        (h, w), start = self.grids[image], self.starts[image] + self.prefix_per_image
        return self.rows[image], slice(start, start + h * w)

    def prefix_index(self, image: int) -> tuple[int, slice]:
        """(row, columns) of image ``image``'s prefix tokens."""
        start = self.starts[image]
        return self.rows[image], slice(start, start + self.prefix_per_image)

    def grid_groups(self, device: torch.device | None = None) -> list[GridGroup]:
        """The images of each distinct grid, with the flat (row * T + column) indices of their patch tokens."""

        def build(dev: torch.device) -> list[GridGroup]:
            patches, image = self._patch_tokens()  # image-major, each image row-major
            groups = []
            for grid in self.distinct_grids:
                images = tuple(i for i, g in enumerate(self.grids) if g == grid)
                index = patches[torch.isin(image, torch.tensor(images))].reshape(len(images), grid[0] * grid[1])
                groups.append(GridGroup(grid, images, index.to(dev)))
            return groups

        return self._cached('groups', device, build)

    def grouped_patch_index(self, device: torch.device | None = None) -> torch.Tensor:
        """(sum of h*w,) long: the ``grid_groups``' token indices, group after group."""
        return self._cached(
            'grouped', device, lambda dev: torch.cat([g.index.reshape(-1) for g in self.grid_groups(dev)])
        )

    def place(self, tokens: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """Per-image (h*w, D) patch tokens (or one concatenated tensor) -> (B, T, D), zero on prefix and padding."""
        flat = tokens if isinstance(tokens, torch.Tensor) else torch.cat(list(tokens))
        index = self._cached('patches', flat.device, lambda dev: self._patch_tokens()[0].to(dev))
        out = flat.new_zeros(self.num_rows * self.length, flat.shape[-1])
        return out.index_copy(0, index, flat).reshape(self.num_rows, self.length, -1)

    def place_prefix(self, x: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        """``x`` (B, T, D) with every image's P prefix tokens set to ``prefix`` (P, D)."""
        B, T, D = x.shape
        index = self._cached('prefix', x.device, lambda dev: self._prefix_tokens()[0].to(dev))
        values = prefix.reshape(-1, D).to(x.dtype).repeat(self.num_images, 1)
        return x.reshape(B * T, D).index_copy(0, index, values).reshape(B, T, D)

    def image_tokens(self, device: torch.device | None = None) -> torch.Tensor:
        """Flat indices of every image's tokens, prefix first, images in input order."""

        def build(dev: torch.device) -> torch.Tensor:
            prefix, prefix_image = self._prefix_tokens()
            patches, patch_image = self._patch_tokens()
            index, image = torch.cat([prefix, patches]), torch.cat([prefix_image, patch_image])
            order = torch.sort(image, stable=True).indices  # per image: its prefix, then its patches
            return index[order].to(dev)

        return self._cached('images', device, build)

    def unpack(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(B, T, ...) -> per image, in input order, its (P + h*w, ...) tokens, prefix first."""
        flat = x.reshape(self.num_rows * self.length, *x.shape[2:])[self.image_tokens(x.device)]
        return list(flat.split([self.prefix_per_image + h * w for h, w in self.grids]))


def add_per_grid(
    x: torch.Tensor,
    layout: TokenLayout,
    fn: Callable[[torch.Tensor], torch.Tensor],
    source: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x`` (B, T, C) plus, on each image's patch tokens, ``fn`` ((n, C, h, w) -> same shape) of that image's
    ``source`` tokens on its grid; prefix and padding keep their value, and no image sees another's tokens."""
    B, T, C = x.shape
    flat = x.reshape(B * T, C)
    src = flat if source is None else source.reshape(B * T, C)
    groups = layout.grid_groups(x.device)
    index = layout.grouped_patch_index(x.device)  # every group's tokens, group after group
    # one gather of every image's patch tokens, one scatter of what fn adds: per group only the views and fn
    feats = src[index].split([g.index.numel() for g in groups])
    added = []
    for group, feat in zip(groups, feats):
        h, w = group.grid
        out = fn(feat.reshape(-1, h * w, C).transpose(1, 2).reshape(-1, C, h, w))  # (n, C, h, w), channels-last view
        added.append(out.reshape(-1, C, h * w).transpose(1, 2).reshape(-1, C))
    return flat.index_add(0, index, torch.cat(added).to(flat.dtype)).reshape(B, T, C)


def make_layout(
    grids: Sequence[tuple[int, int]], prefix_per_image: int, mode: str = 'pad', capacity: int | None = None
) -> TokenLayout:
    """The layout of images with token ``grids`` (h, w), each with ``prefix_per_image`` prefix tokens. ``pad``: one
    image per row. ``pack``: first-fit by decreasing token count into rows of ``capacity`` + P tokens (None: the
    longest image's h*w); an image larger than ``capacity`` raises ValueError."""
    if mode not in MODES:
        raise ValueError(
            f'mixed_sizes must be one of {list(MODES)} (padding to the longest image, or packing), got {mode!r}'
        )
    if not grids:
        raise ValueError('a mixed batch needs at least one image')
    P = prefix_per_image
    sizes = [P + h * w for h, w in grids]
    if mode == 'pad':
        rows, slots, starts = tuple(range(len(grids))), (0,) * len(grids), (0,) * len(grids)
        return TokenLayout(tuple(grids), rows, slots, starts, len(grids), 1, P, max(sizes))
    patches = max(h * w for h, w in grids)
    cap = patches if capacity is None else int(capacity)
    if patches > cap:
        raise ValueError(
            f'pack_tokens={cap} is smaller than an image of {patches} patch tokens; raise pack_tokens to at '
            f'least {patches} (or None: the longest image)'
        )
    fill: list[int] = []  # tokens used per row
    count: list[int] = []  # images per row
    row_of, slot_of, start_of = [0] * len(grids), [0] * len(grids), [0] * len(grids)
    for i in sorted(range(len(grids)), key=lambda i: -sizes[i]):
        row = next((r for r, used in enumerate(fill) if used + sizes[i] <= cap + P), None)
        if row is None:
            row = len(fill)
            fill.append(0)
            count.append(0)
        row_of[i], slot_of[i], start_of[i] = row, count[row], fill[row]
        fill[row] += sizes[i]
        count[row] += 1
    return TokenLayout(
        tuple(grids), tuple(row_of), tuple(slot_of), tuple(start_of), len(fill), max(count), P, max(fill)
    )


__all__ = ['MODES', 'GridGroup', 'TokenLayout', 'add_per_grid', 'make_layout']
