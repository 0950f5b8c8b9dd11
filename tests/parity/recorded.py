"""What the parity tests share: reading a recorded file, and the channel order of the references."""

from __future__ import annotations

import os

import torch

PARITY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'data', 'parity')


def recorded(name: str) -> dict:
    """tests/data/parity/<name>.pt, written by its recorder in tools/parity (read as data only)."""
    return torch.load(os.path.join(PARITY, f'{name}.pt'), weights_only=True)


def interleaved(x: torch.Tensor) -> torch.Tensor:
    """Channels in the rotate-half order (pair i = channels i and i + d/2) -> vispe's interleaved order (pair i =
    channels 2i, 2i + 1): a permutation of q's and k's channels that leaves every q . k as it is."""
    half = x.shape[-1] // 2
    order = torch.stack([torch.arange(half), torch.arange(half) + half], -1).flatten()
    return x[..., order]


def view_tokens(embedding: torch.Tensor) -> torch.Tensor:
    """A camera reference's (B, V, C, h, w) embedding as vispe's tokens (B, V h w, C), view-major and row-major."""
    return embedding.permute(0, 1, 3, 4, 2).flatten(1, 3)
