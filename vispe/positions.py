"""Token positions, computed once per forward pass by a backbone and handed to every encoding, and the training-time
position samplers (``rpe2d``, ``fuzzy``). Traced (symbolic) sizes get ``key=None``: nothing is cached on them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from vispe.geometry import check_cameras
from vispe.layout import TokenLayout
from vispe.registry import POSITION_SAMPLERS

#: a size while a model is traced: FX Proxy (symbolic tracing), SymInt (torch.export, dynamic torch.compile)
_SYMBOLIC = (torch.fx.Proxy, torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(*values: Any) -> bool:
    """True when any of ``values`` is a traced stand-in (FX Proxy, SymInt), which Python may not branch on or hash."""
    return any(isinstance(v, _SYMBOLIC) for v in values)


def autocast_off(x: torch.Tensor):
    """Autocast disabled on ``x``'s device, for float32 sections; a null context while FX traces."""
    if isinstance(x, torch.fx.Proxy):
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, enabled=False)


@torch.fx.wrap
def sizes_tensor(sizes: list[int], device: torch.device | None) -> torch.Tensor:
    """An FX leaf: a traced graph calls it with the concrete sizes."""
    return torch.tensor(sizes, dtype=torch.float32, device=device)


@dataclass
class Cameras:
    """The cameras of a multi-view forward pass (OpenCV convention), checked on construction (``check_cameras``).

    Attributes:
        K: (B, V, 3, 3) intrinsics in pixels; cam_to_world: (B, V, 4, 4) poses.
        view: (N,) long, the view of each non-prefix token (view-major).
        image_size: (H, W) of every view in pixels; patch_size: pixels per token side.
        depth: (B, V, h, w) depth of the nearest surface each token sees, 0 where none; None without depth maps.
    """

    K: torch.Tensor
    cam_to_world: torch.Tensor
    view: torch.Tensor
    image_size: tuple[int, int]
    patch_size: int
    depth: torch.Tensor | None = None

    def __post_init__(self) -> None:
        check_cameras(self.K, self.cam_to_world)

    @property
    def num_views(self) -> int:
        return self.K.shape[1]

    @property
    def grid(self) -> tuple[int, int]:
        return self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size

    def per_token(self, per_view: torch.Tensor) -> torch.Tensor:
        """(B, V, ...) -> (B, N, ...): each token's entry of a per-view tensor."""
        return per_view[:, self.view]


@dataclass
class Positions:
    """Where the tokens of one forward pass sit.

    Attributes:
        coords: (N, ndim) or (B, N, ndim) non-prefix token coordinates: (row, col) in grid cells, or points' units.
        grid: (h, w) for a row-major token grid, (t, h, w) for a video's tubelets, else None.
        num_prefix: cls / register tokens in front of the N tokens; they carry no position.
        key: a hashable naming ``coords`` when the grid determines them (tables may be cached on it), else None.
        extent: per axis, the range [0, extent) the coordinates were drawn from when larger than the grid (rpe2d).
        layout: a mixed-size batch's ``TokenLayout``; then ``coords`` are (B, T, 2), ``grid`` None, ``num_prefix`` 0.
        spacing: per axis, the distance between neighbouring grid tokens when not 1 (a video's time); in ``coords``.
        noise_level: the diffusion time in [0, 1] (1: pure noise), () or (B,), set by the DiT; else None.
        draws: random values all layers share within the pass, kept by ``dataclasses.replace``; ``aux_losses`` and
            ``tables`` (what the layers share in the pass) are not arguments and start empty in a replace.
    """

    coords: torch.Tensor
    grid: tuple[int, ...] | None = None
    num_prefix: int = 0
    cameras: Cameras | None = None
    key: Hashable | None = None
    extent: tuple[int, ...] | None = None
    layout: TokenLayout | None = None
    spacing: tuple[float, ...] | None = None
    noise_level: torch.Tensor | None = None
    draws: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    aux_losses: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)
    tables: dict[str, Any] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def on_grid(self) -> bool:
        """The tokens sit on image grids: one grid, or (a mixed batch) each image's own."""
        return self.grid is not None or self.layout is not None

    @property
    def span(self) -> tuple[float, ...] | None:
        return self.extent if self.extent is not None else self.grid_span

    @property
    def grid_span(self) -> tuple[float, ...] | None:
        if self.grid is None or self.spacing is None:
            return self.grid
        return tuple(g * s for g, s in zip(self.grid, self.spacing))

    @property
    def ndim(self) -> int:
        return self.coords.shape[-1]

    @property
    def num_tokens(self) -> int:
        """Non-prefix tokens."""
        return self.coords.shape[-2]

    def cache_key(self, *extra: Hashable) -> tuple | None:
        """A key for tables derived from these positions, or None when they must not be cached."""
        if self.key is None or is_symbolic(*(self.key if isinstance(self.key, tuple) else (self.key,))):
            return None
        return (self.key, self.num_prefix, self.coords.device, *extra)

    def span_tensor(self) -> torch.Tensor:
        """``span`` as an (ndim,) float32 tensor, also for symbolic sizes; (B, T, ndim) in a mixed batch."""
        if self.layout is not None and self.extent is None:
            return self.layout.token_grid(self.coords.device)
        sizes = self.extent if self.extent is not None else self.grid
        if sizes is None:
            raise ValueError('span_tensor needs positions on a grid or with an extent; these have neither')
        span = sizes_tensor(list(sizes), self.coords.device)
        if self.extent is None and self.spacing is not None:
            span = span * torch.tensor(self.spacing, device=span.device)
        return span


def lattice_coords(sizes: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """(prod(sizes), len(sizes)) float32 integer coordinates of a grid, row-major."""
    axes = [torch.arange(n, device=device, dtype=torch.float32) for n in sizes]
    return torch.stack(torch.meshgrid(*axes, indexing='ij'), dim=-1).reshape(-1, len(sizes))


def grid_coords(h: int, w: int, device: torch.device | None = None) -> torch.Tensor:
    return lattice_coords((h, w), device)


def grid_positions(h: int, w: int, num_prefix: int = 0, device: torch.device | None = None) -> Positions:
    """Positions of an h x w token grid with ``num_prefix`` prefix tokens; ``key=None`` for symbolic sizes."""
    key = None if is_symbolic(h, w) else ('grid', h, w)
    return Positions(grid_coords(h, w, device), grid=(h, w), num_prefix=num_prefix, key=key)


def video_positions(
    t: int, h: int, w: int, num_prefix: int = 0, time_spacing: float = 1.0, device: torch.device | None = None
) -> Positions:
    """Positions of a t x h x w grid of tubelets, time-major, (time, row, col), ``time_spacing`` (> 0) apart in time."""
    if not time_spacing > 0:
        raise ValueError(f'time_spacing must be > 0 (the time between tubelets), got {time_spacing!r}')
    coords = lattice_coords((t, h, w), device)
    spacing = None if time_spacing == 1.0 else (float(time_spacing), 1.0, 1.0)
    if spacing is not None:
        coords = coords * torch.tensor(spacing, device=device)
    key = None if is_symbolic(t, h, w) else ('video', t, h, w, float(time_spacing))
    return Positions(coords, grid=(t, h, w), num_prefix=num_prefix, key=key, spacing=spacing)


def sorted_subsets(batch_size: int, count: int, limit: int, generator=None, device=None) -> torch.Tensor:
    """(B, count) float32: per row, ``count`` distinct integers drawn uniformly from [0, limit), sorted."""
    scores = torch.rand(batch_size, limit, generator=generator, device=device)
    return scores.topk(count, dim=-1).indices.sort(dim=-1).values.float()


@POSITION_SAMPLERS.register_module(name='rpe2d')
class RPE2D:
    """RPE-2D: in training an h x w grid gets h sorted distinct rows and w sorted distinct columns drawn uniformly
    from [0, L) per axis and sample; evaluation uses the plain grid. ``grid`` is kept for grid encodings.

    Args:
        max_grid: (H_max, W_max), L per axis: the largest token grid to be served.
    """

    def __init__(self, max_grid: Sequence[int]) -> None:
        if len(max_grid) != 2 or min(int(m) for m in max_grid) < 1:
            raise ValueError(f'rpe2d needs max_grid=(H_max, W_max), two positive ints, got {max_grid!r}')
        self.max_grid: tuple[int, int] = (int(max_grid[0]), int(max_grid[1]))

    def __repr__(self) -> str:
        return f'RPE2D(max_grid={self.max_grid})'

    def check(self, grid: tuple[int, ...] | None) -> tuple[int, int]:
        """The (h, w) grid; raises ValueError unless L >= the grid on each axis."""
        if grid is None:
            raise ValueError('rpe2d samples positions for a token grid, but these positions have no grid')
        if len(grid) != 2:
            raise ValueError(f'rpe2d samples positions on an image token grid (h, w), got the grid {grid}')
        h, w = grid
        if h > self.max_grid[0] or w > self.max_grid[1]:
            raise ValueError(
                f'rpe2d: max_grid (L) {self.max_grid[0]}x{self.max_grid[1]} must be >= the token grid on each axis, '
                f'got a {h}x{w} grid; raise max_grid to the largest grid the model will serve'
            )
        return h, w

    def __call__(self, pos: Positions, batch_size: int, generator: torch.Generator | None = None) -> Positions:
        if pos.layout is not None:
            return self.sample_layout(pos, generator)
        h, w = self.check(pos.grid)
        device = generator.device if generator is not None else pos.coords.device
        rows = sorted_subsets(batch_size, h, self.max_grid[0], generator, device)  # (B, h)
        cols = sorted_subsets(batch_size, w, self.max_grid[1], generator, device)  # (B, w)
        coords = torch.stack([rows[:, :, None].expand(-1, h, w), cols[:, None, :].expand(-1, h, w)], dim=-1)
        return Positions(
            coords.reshape(batch_size, h * w, 2).to(pos.coords.device),
            grid=pos.grid,
            num_prefix=pos.num_prefix,
            cameras=pos.cameras,
            key=None,
            extent=self.max_grid,
        )

    def sample_layout(self, pos: Positions, generator: torch.Generator | None = None) -> Positions:
        layout = pos.layout
        assert layout is not None
        device = generator.device if generator is not None else pos.coords.device
        coords = pos.coords.detach().clone().reshape(-1, 2)  # (B * T, 2), prefix and padding keep their 0
        for group in layout.grid_groups(pos.coords.device):
            h, w = self.check(group.grid)
            n = len(group.images)
            rows = sorted_subsets(n, h, self.max_grid[0], generator, device)
            cols = sorted_subsets(n, w, self.max_grid[1], generator, device)
            drawn = torch.stack([rows[:, :, None].expand(-1, h, w), cols[:, None, :].expand(-1, h, w)], dim=-1)
            coords[group.index.reshape(-1)] = drawn.reshape(-1, 2).to(coords.device)
        return dataclasses.replace(pos, coords=coords.reshape(pos.coords.shape), key=None, extent=self.max_grid)


@POSITION_SAMPLERS.register_module(name='fuzzy')
class FuzzyPositions:
    """ViTAR's fuzzy positions (Fan et al. 2024): in training each patch token moves by an offset drawn uniformly
    from [-radius, radius) per axis, token and sample; evaluation uses the exact grid.

    Args:
        radius: half-width of the offset in cells, in (0, 0.5].
    """

    def __init__(self, radius: float = 0.5) -> None:
        if isinstance(radius, bool) or not isinstance(radius, (int, float)) or not 0.0 < radius <= 0.5:
            raise ValueError(
                f"fuzzy needs a radius in (0, 0.5] cells (0.5: anywhere in the token's own cell), got {radius!r}"
            )
        self.radius = float(radius)

    def __repr__(self) -> str:
        return f'FuzzyPositions(radius={self.radius})'

    def __call__(self, pos: Positions, batch_size: int, generator: torch.Generator | None = None) -> Positions:
        if not pos.on_grid:
            raise ValueError('fuzzy jitters the positions of a token grid, but these positions have no grid')
        device = generator.device if generator is not None else pos.coords.device
        shape = (batch_size, *pos.coords.shape[-2:])
        offsets = (torch.rand(shape, generator=generator, device=device) * 2 - 1) * self.radius
        offsets = offsets.to(pos.coords.device)
        if pos.layout is not None:  # prefix and padding tokens carry no position: they keep 0
            offsets = offsets * pos.layout.patch_mask(pos.coords.device)[..., None]
        return dataclasses.replace(pos, coords=pos.coords.float() + offsets, key=None)


PositionSampler = Callable[..., Positions]


def build_position_sampler(
    spec: None | dict[str, Any] | PositionSampler, grid: tuple[int, int] | None = None
) -> PositionSampler | None:
    """A sampler from None, a config dict or a callable ``(pos, batch_size) -> Positions``, checked on ``grid``."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        sampler = POSITION_SAMPLERS.build(dict(spec))
    elif callable(spec):
        sampler = spec
    else:
        raise TypeError(f"a position sampler is a config dict with a 'type' key or a callable, got {spec!r}")
    if grid is not None and hasattr(sampler, 'check'):
        sampler.check(tuple(grid))
    return sampler
