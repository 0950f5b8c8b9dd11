"""Token positions, computed once per forward pass by a backbone and handed to every encoding.

An encoding never guesses a grid from a token count: it reads ``Positions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Optional, Tuple

import torch


@dataclass
class Positions:
    """Where the tokens of one forward pass sit.

    Attributes:
        coords: (N, ndim) or (B, N, ndim) float coordinates of the N non-prefix tokens. Images use
            token-grid units in (row, col) order; point clouds use the data's metric unit.
        grid: (h, w) when the N tokens form a row-major grid, else None. Conv encodings need it.
        num_prefix: cls / register tokens in front of the N tokens; they carry no position.
        cameras: optional camera data for camera encodings (view index, K, cam-to-world, image size).
        key: a hashable naming ``coords`` when they are a deterministic function of the grid (so encodings
            may cache tables derived from them); None when coords vary per call (e.g. sampled positions).
    """

    coords: torch.Tensor
    grid: Optional[Tuple[int, int]] = None
    num_prefix: int = 0
    cameras: Any = None
    key: Optional[Hashable] = None

    @property
    def ndim(self) -> int:
        return self.coords.shape[-1]

    @property
    def num_tokens(self) -> int:
        """Non-prefix tokens."""
        return self.coords.shape[-2]

    def cache_key(self, *extra: Hashable) -> Optional[tuple]:
        """A key for tables derived from these positions, or None when they must not be cached."""
        if self.key is None:
            return None
        return (self.key, self.num_prefix, self.coords.device, *extra)


def grid_coords(h: int, w: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(h*w, 2) float32 (row, col) integer coordinates of an h x w grid, row-major."""
    rows = torch.arange(h, device=device, dtype=torch.float32)
    cols = torch.arange(w, device=device, dtype=torch.float32)
    return torch.stack(torch.meshgrid(rows, cols, indexing='ij'), dim=-1).reshape(-1, 2)


def grid_positions(h: int, w: int, num_prefix: int = 0, device: Optional[torch.device] = None) -> Positions:
    """Positions of an h x w token grid with ``num_prefix`` prefix tokens in front."""
    return Positions(grid_coords(h, w, device), grid=(h, w), num_prefix=num_prefix, key=('grid', h, w))
