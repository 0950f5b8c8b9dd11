"""Token positions, computed once per forward pass by a backbone and handed to every encoding, and position
samplers that replace them in training (``POSITION_SAMPLERS``: ``rpe2d``, ``fuzzy``).

An encoding never guesses a grid from a token count: it reads ``Positions``.

Traced models (``torch.fx.symbolic_trace``, ``torch.export`` with dynamic sizes, ``torch.compile`` with dynamic
shapes): the grid (h, w) then holds symbolic sizes (FX Proxies, SymInts) instead of ints, ``is_symbolic`` says so.
Such positions get ``key=None``, so no table cache is ever keyed on (or filled with) a symbolic size, and the
tables are computed in the graph, at the size of each call. Where a table needs the sizes as ints, the work is a
``torch.fx.wrap`` leaf function (``sizes_tensor`` here), which an FX graph calls at run time with the concrete
sizes; those leaves are TorchScript-compatible, so an FX graph of the model can be scripted.
"""

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

#: what a size is while a model is traced instead of run: an FX Proxy (symbolic tracing) or a SymInt (torch.export,
#: torch.compile with dynamic shapes)
_SYMBOLIC = (torch.fx.Proxy, torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(*values: Any) -> bool:
    """True when any of ``values`` is a traced stand-in (an FX Proxy or a SymInt) rather than a concrete number or
    tensor: Python may then not branch on it, hash it, or turn it into an int without baking one size in."""
    return any(isinstance(v, _SYMBOLIC) for v in values)


def autocast_off(x: torch.Tensor):
    """``torch.autocast(x.device.type, enabled=False)``, for float32 sections; a null context while FX traces, where
    ``x.device`` is unknown (a Proxy) and FX would not record a context manager anyway."""
    if isinstance(x, torch.fx.Proxy):
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, enabled=False)


@torch.fx.wrap
def sizes_tensor(sizes: list[int], device: torch.device | None) -> torch.Tensor:
    """The (ndim,) float32 tensor of per-axis ``sizes``. An FX leaf: ``torch.tensor`` cannot take Proxy sizes, so
    an FX graph calls this at run time with the concrete ones (and TorchScript can compile it)."""
    return torch.tensor(sizes, dtype=torch.float32, device=device)


@dataclass
class Cameras:
    """The cameras of a multi-view forward pass and where each token sits in them (OpenCV convention, see
    ``vispe.geometry``).

    Attributes:
        K: (B, V, 3, 3) intrinsics in pixels. cam_to_world: (B, V, 4, 4) poses.
        view: (N,) long, the view of each non-prefix token (tokens are view-major: view 0's grid first).
        image_size: (H, W) of every view in pixels. patch_size: pixels per token side; token (i, j) of a view
            covers pixels [i p, (i + 1) p) x [j p, (j + 1) p).
        depth: (B, V, h, w) camera-frame depth of the nearest surface each token sees (the minimum over its
            patch's pixels), 0 where it sees none; None when the views came without depth maps (3DPPE reads it).

    Every camera encoding reads its cameras from here, so this is where they are checked, once per forward pass:
    a singular or non-finite K, or a pose that is not rigid (``vispe.geometry.check_cameras``, tolerance
    ``CAMERA_TOL``), is a ValueError naming the view, not NaN tokens. Skipped while traced (torch.compile).
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
        """The (h, w) token grid of one view."""
        return self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size

    def per_token(self, per_view: torch.Tensor) -> torch.Tensor:
        """(B, V, ...) -> (B, N, ...): each token's entry of a per-view tensor."""
        return per_view[:, self.view]


@dataclass
class Positions:
    """Where the tokens of one forward pass sit.

    Attributes:
        coords: (N, ndim) or (B, N, ndim) float coordinates of the N non-prefix tokens. Images use
            token-grid units in (row, col) order; point clouds use the data's metric unit.
        grid: (h, w) when the N tokens form a row-major grid, (t, h, w) for a video's tubelets (``video_positions``),
            else None. Conv encodings need it.
        num_prefix: cls / register tokens in front of the N tokens; they carry no position.
        cameras: ``Cameras`` for camera encodings (view index, K, cam-to-world, image size), or None.
        key: a hashable naming ``coords`` when they are a deterministic function of the grid (so encodings
            may cache tables derived from them); None when coords vary per call (e.g. sampled positions).
        extent: per axis, the integer range [0, extent) the coordinates were drawn from when it is larger than
            the grid (rpe2d's enlarged range L); None: the grid itself.
        layout: for a batch of images of different sizes, where each image's tokens sit (``vispe.layout``); then
            ``coords`` are (B, T, 2) for every token of each row, in the token's own image (0 on prefix and
            padding), ``grid`` is None and ``num_prefix`` 0: each image's prefix tokens sit inside the row, at the
            front of its segment (``layout.patch_mask`` is False there). None: every sample shares the token
            layout.
        spacing: per axis, the distance in coordinate units between neighbouring tokens of the grid, when it is not
            1: a video's time between tubelets, in the unit of the training clips' (2 for a clip at half their frame
            rate, so that its tokens sit at the times of the training clips' even tubelets). The coordinates
            already include it; ``span`` multiplies the grid by it. A property of the data, not of the encoding.
        noise_level: the diffusion time of this forward pass in [0, 1] (1: pure noise, 0: data), () or (B,) float,
            for strategies that follow it (DyPE's ``dype_ntk``, ``dype_yarn``); set by the DiT from its sampler
            (``DiffusionModel``), None elsewhere.
        draws: random values of this forward pass that every layer's encoding must share, by name (rope_dinov3's
            coordinate augmentation: one draw per forward pass, as in DINOv3, not one per layer). The positions are
            made anew for each forward pass, and so is this dict; ``dataclasses.replace`` (a position sampler)
            keeps it.
        aux_losses: auxiliary training losses the encodings computed in this forward pass, by name (3DPPE's depth
            loss); a backbone that has them hands them to its task (``MultiViewTransformer.forward_with_losses``).
            Not an argument, and empty in a new ``dataclasses.replace``.
        tables: what the layers' encodings derive from these positions alone and share within the forward pass,
            by name (2D ALiBi's bias, rope_dinov3's augmented table). Not an argument: ``dataclasses.replace`` (new
            coordinates) starts an empty dict, so nothing derived from other coordinates is ever read.
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
        """Per axis, how many integer positions the coordinates range over: ``extent`` when set, else ``grid`` (times
        ``spacing`` when set). Encodings on normalised coordinates divide by it, so rpe2d's training positions and
        the plain grid of the largest served size land on the same [0, 1] values."""
        return self.extent if self.extent is not None else self.grid_span

    @property
    def grid_span(self) -> tuple[float, ...] | None:
        """Per axis, the grid's extent in coordinate units: ``grid`` times ``spacing`` (a video at half the training
        frame rate spans twice its tubelets in time), the grid itself without spacing; None without a grid. What
        the rotary strategies compare with the training grid."""
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
        """``span`` as an (ndim,) float32 tensor on the coordinates' device, also when the sizes are symbolic (an FX
        graph computes it at run time through the leaf ``sizes_tensor``). In a mixed batch without an extent, each
        token's own grid: (B, T, ndim)."""
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
    """(prod(sizes), len(sizes)) float32 integer coordinates of a grid of any dimension, row-major (the last axis
    fastest)."""
    axes = [torch.arange(n, device=device, dtype=torch.float32) for n in sizes]
    return torch.stack(torch.meshgrid(*axes, indexing='ij'), dim=-1).reshape(-1, len(sizes))


def grid_coords(h: int, w: int, device: torch.device | None = None) -> torch.Tensor:
    """(h*w, 2) float32 (row, col) integer coordinates of an h x w grid, row-major."""
    return lattice_coords((h, w), device)


def grid_positions(h: int, w: int, num_prefix: int = 0, device: torch.device | None = None) -> Positions:
    """Positions of an h x w token grid with ``num_prefix`` prefix tokens in front. Symbolic sizes (a traced model)
    get ``key=None``: caches are keyed on concrete ints only, and the graph builds the coordinates each call."""
    key = None if is_symbolic(h, w) else ('grid', h, w)
    return Positions(grid_coords(h, w, device), grid=(h, w), num_prefix=num_prefix, key=key)


def video_positions(
    t: int, h: int, w: int, num_prefix: int = 0, time_spacing: float = 1.0, device: torch.device | None = None
) -> Positions:
    """Positions of a t x h x w grid of tubelets (time-major: frame 0's h x w tokens first) with ``num_prefix``
    prefix tokens in front: coordinates (t * h * w, 3) in (time, row, col) order, time in units of the training
    clips' tubelets (``time_spacing`` between neighbours: 2 for a clip at half the training frame rate), grid
    (t, h, w). Symbolic sizes get ``key=None``, as in ``grid_positions``."""
    if not time_spacing > 0:
        raise ValueError(f'time_spacing must be > 0 (the time between tubelets), got {time_spacing!r}')
    coords = lattice_coords((t, h, w), device)
    spacing = None if time_spacing == 1.0 else (float(time_spacing), 1.0, 1.0)
    if spacing is not None:
        coords = coords * torch.tensor(spacing, device=device)
    key = None if is_symbolic(t, h, w) else ('video', t, h, w, float(time_spacing))
    return Positions(coords, grid=(t, h, w), num_prefix=num_prefix, key=key, spacing=spacing)


def sorted_subsets(batch_size: int, count: int, limit: int, generator=None, device=None) -> torch.Tensor:
    """(B, count) float32: per row, ``count`` distinct integers drawn uniformly from [0, limit), sorted.

    The top-``count`` of ``limit`` uniform scores is a uniformly random subset of that size.
    """
    scores = torch.rand(batch_size, limit, generator=generator, device=device)
    return scores.topk(count, dim=-1).indices.sort(dim=-1).values.float()


@POSITION_SAMPLERS.register_module(name='rpe2d')
class RPE2D:
    """RPE-2D, randomized 2D positions for resolution generalisation (as described in ENCODINGS.md, "Position
    samplers"): in training, an h x w grid gets h sorted distinct row positions and w sorted distinct column
    positions drawn uniformly from the enlarged integer range [0, L) of each axis, independently per axis and per
    sample, so that every position of the largest grid to be served is seen in training. At evaluation the backbone
    does not call it and the plain grid positions are used.

    Args:
        max_grid: (H_max, W_max), L per axis: the largest token grid to be served.

    ``__call__(pos, batch_size, generator=None)``: grid positions -> per-sample coords (B, h*w, 2) (row, col),
    ``key=None`` (nothing may cache them); ``grid``, ``num_prefix`` and ``cameras`` are kept, so encodings that
    work on the image grid (ape_learned's table, peg / lepe convs) see the image grid, while coordinate encodings
    (rope_*, ape_sincos, lff, irpe buckets) see the sampled positions.
    """

    def __init__(self, max_grid: Sequence[int]) -> None:
        if len(max_grid) != 2 or min(int(m) for m in max_grid) < 1:
            raise ValueError(f'rpe2d needs max_grid=(H_max, W_max), two positive ints, got {max_grid!r}')
        self.max_grid: tuple[int, int] = (int(max_grid[0]), int(max_grid[1]))

    def __repr__(self) -> str:
        return f'RPE2D(max_grid={self.max_grid})'

    def check(self, grid: tuple[int, ...] | None) -> tuple[int, int]:
        """The (h, w) grid, after checking that L >= the grid on each axis."""
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
        """A mixed batch (``pos.layout``): each image's rows and columns drawn as for its own grid."""
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
    """ViTAR's fuzzy positions (Fan et al. 2024, "ViTAR: Vision Transformer with Any Resolution"): in training, each
    token's (row, col) grid coordinate gets an offset drawn uniformly from [-radius, radius) on each axis,
    independently per token and per sample, so that it lands anywhere in its own cell (radius 1/2, ViTAR's);
    evaluation (the backbone does not call a sampler then) uses the exact grid.

    With ape_learned's ``grid_sample`` strategy the learned table is then read between its entries at the jittered
    points (ViTAR's fuzzy positional encoding); coordinate encodings (ape_sincos, rope_*, lff) see the jittered
    coordinates as they are. ape_learned's resampling strategies (bicubic, ...) read the grid, not the coordinates,
    so with them this sampler leaves ape_learned unchanged.

    Args:
        radius: half-width of the uniform offset per axis, in cells, in (0, 0.5].

    ``__call__(pos, batch_size, generator=None)``: grid positions -> per-sample coords (B, N, 2) (row, col),
    ``key=None`` (nothing may cache them); ``grid``, ``num_prefix``, ``extent`` and ``cameras`` are kept. In a mixed
    batch (``pos.layout``) the patch tokens alone are jittered (prefix and padding keep coordinate 0). Cost: one
    (B, N, 2) uniform draw per training step.
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
    """None -> None; a config dict (``dict(type='rpe2d', max_grid=(16, 16))``) -> built from POSITION_SAMPLERS;
    a callable ``(pos, batch_size) -> Positions`` is used as is. With ``grid``, the model's token grid at its
    img_size, a sampler with a ``check(grid)`` (rpe2d) is checked now, at build, not in the first training step."""
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
