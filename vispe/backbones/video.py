"""A space-time ViT for video: tubelet tokens with (t, h, w) positions (``video_positions``) and joint space-time
attention (ViViT's unfactorised model, as VideoMAE fine-tunes it), for the encodings of ``list_encodings(ndim=3)``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from timm.layers import trunc_normal_
from torch import Tensor, nn

from vispe.backbones.base import PEBackbone, pe_blocks
from vispe.backbones.common import PatchConv3d, check_input_dtype, check_num_classes, check_rates, check_size
from vispe.encodings.build import EncodingSpec
from vispe.positions import Positions, video_positions
from vispe.registry import MODELS

#: the head's pooling: the cls token ('token', ViT's) or the mean of the tubelet tokens ('avg', VideoMAE's)
POOLS = ('token', 'avg')


@MODELS.register_module()
class VideoTransformer(PEBackbone):
    """Joint space-time attention over the tubelet tokens of a clip, with a cls token and a linear head.

    Args:
        num_classes: outputs of the head.
        encoding: vispe encoding spec for 3D grid positions.
        img_size: training frame size (H, W or one int).
        num_frames: training frames T.
        patch_size: the tubelet's side p in pixels.
        tubelet_size: the tubelet's length in frames.
        in_chans: channels of each frame.
        embed_dim: model width.
        depth: blocks.
        num_heads: attention heads, dividing embed_dim.
        mlp_ratio: MLP width over embed_dim.
        drop_path_rate: stochastic depth of the last block, rising linearly from 0.
        global_pool: 'token' (the cls token) or 'avg' (the mean of the tubelet tokens).

    ``forward(clips, time_spacing=None)``: (B, C, T, H, W), T divisible by the tubelet and H, W by the patch -> (B,
    num_classes); ``time_spacing``: the time between tubelets in the training clips' units (2: half the training frame
    rate; None: the model's). A list of (C, T_i, H_i, W_i) clips gives one row per clip, each size one batch.
    """

    #: the tubelet embedding and the cls token (layer 0 of layer-wise lr decay, with the model-level encodings)
    stem_prefixes = ('patch_embed', 'cls_token')
    #: the time between tubelets when ``forward`` is not told (a sweep that feeds clips at another frame rate through
    #: a classifier sets it; ``vispe.sweeps.video``)
    time_spacing: float = 1.0

    def __init__(
        self,
        num_classes: int = 4,
        encoding: EncodingSpec = 'rope_axial',
        img_size: int | tuple[int, int] = 32,
        num_frames: int = 8,
        patch_size: int = 4,
        tubelet_size: int = 2,
        in_chans: int = 3,
        embed_dim: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        drop_path_rate: float = 0.1,
        global_pool: str = 'token',
    ) -> None:
        super().__init__()
        name = type(self).__name__
        for arg, value in dict(num_frames=num_frames, patch_size=patch_size, tubelet_size=tubelet_size).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name}: {arg} must be an int >= 1, got {arg}={value!r}')
        if global_pool not in POOLS:
            raise ValueError(f'{name}: global_pool must be one of {POOLS}, got {global_pool!r}')
        check_rates(name, drop_path_rate=drop_path_rate)
        check_num_classes(name, num_classes)
        height, width = check_size(name, 'img_size', img_size)
        self.num_classes, self.global_pool, self.in_chans = num_classes, global_pool, in_chans
        self.patch_size, self.tubelet_size = patch_size, tubelet_size
        self.img_size, self.num_frames = (height, width), num_frames
        self.check_clip_size(num_frames, height, width, 'the training clip (num_frames, img_size)')
        grid = (num_frames // tubelet_size, height // patch_size, width // patch_size)
        self.grid_size = grid
        kernel = (tubelet_size, patch_size, patch_size)
        self.patch_embed = PatchConv3d(in_chans, embed_dim, kernel_size=kernel, stride=kernel)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        per_layer = self.build_encodings(encoding, embed_dim, num_heads, depth, grid_size=grid, ndim=3)
        self.blocks = pe_blocks(embed_dim, num_heads, mlp_ratio, drop_path_rate, per_layer)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        trunc_normal_(self.cls_token, std=0.02)

    def check_clip_size(self, frames: int, height: int, width: int, what: str = 'the clip') -> None:
        """ValueError unless frames divide by the tubelet and H, W by the patch."""
        t, p = self.tubelet_size, self.patch_size
        if frames % t or height % p or width % p or min(frames, height, width) < 1:
            raise ValueError(
                f'{type(self).__name__}: {what} is {frames} frames of {height}x{width}; frames must be a multiple of '
                f'tubelet_size={t} and height and width multiples of patch_size={p}: crop or pad the clip, or sample '
                'another frame count'
            )

    def check_input(self, clips: Tensor) -> None:
        """ValueError unless ``clips`` are (B, C, T, H, W) of the model's channels, dtype and divisible sizes."""
        name = type(self).__name__
        if clips.dim() != 5:
            hint = ' (one clip: add a batch axis, clip[None])' if clips.dim() == 4 else ''
            raise ValueError(f'{name}: clips must be (B, C, T, H, W), got shape {tuple(clips.shape)}{hint}')
        if clips.shape[1] != self.in_chans:
            raise ValueError(
                f'{name}: clips have {clips.shape[1]} channels in axis 1, the model takes in_chans={self.in_chans}; '
                'clips are (B, C, T, H, W), channels before time (permute (B, T, C, H, W) clips with '
                '.permute(0, 2, 1, 3, 4))'
            )
        check_input_dtype(name, clips, self.patch_embed.weight)
        self.check_clip_size(*clips.shape[2:])

    def tokens(self, clips: Tensor, time_spacing: float | None = None) -> tuple[Tensor, Positions]:
        """(B, C, T, H, W) -> tokens (B, 1 + t*h*w, D), cls first, and their positions."""
        self.check_input(clips)
        x = self.patch_embed(clips)  # (B, D, t, h, w)
        t, h, w = x.shape[2:]
        spacing = self.time_spacing if time_spacing is None else time_spacing
        pos = video_positions(t, h, w, num_prefix=1, time_spacing=spacing, device=x.device)
        x = self.encoding_stack.embed(x.flatten(2).transpose(1, 2), pos)  # (B, t*h*w, D), (t, h, w) row-major
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1), pos

    def forward_features(self, clips: Tensor, time_spacing: float | None = None) -> Tensor:
        """(B, C, T, H, W) -> normalised tokens (B, 1 + t*h*w, D), the cls token first."""
        return self.norm(self.encode(clips, time_spacing))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Normalised tokens -> logits (or the pooled features with ``pre_logits``)."""
        pooled = x[:, 0] if self.global_pool == 'token' else x[:, 1:].mean(dim=1)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, clips: Tensor | Sequence[Tensor], time_spacing: float | None = None) -> Tensor:
        if not isinstance(clips, Tensor):  # a list of clips
            return self.forward_list(clips, time_spacing)
        return self.forward_head(self.forward_features(clips, time_spacing))

    def forward_list(self, clips: Sequence[Tensor], time_spacing: float | None = None) -> Tensor:
        """A list of (C, T_i, H_i, W_i) clips -> (len(clips), num_classes), in input order."""
        if not clips or any(not isinstance(c, Tensor) or c.dim() != 4 for c in clips):
            shapes = [tuple(c.shape) if isinstance(c, Tensor) else type(c).__name__ for c in clips]
            raise ValueError(
                f'{type(self).__name__}: a list of clips must hold (C, T, H, W) tensors, one per clip, got {shapes}'
            )
        by_size: dict[tuple[int, ...], list[int]] = {}
        for i, clip in enumerate(clips):
            by_size.setdefault(tuple(clip.shape), []).append(i)
        out: list[Tensor | None] = [None] * len(clips)
        for indices in by_size.values():
            logits = self.forward(torch.stack([clips[i] for i in indices]), time_spacing)
            for i, row in zip(indices, logits):
                out[i] = row
        return torch.stack([row for row in out if row is not None])

    def extra_repr(self) -> str:
        return f'grid_size={self.grid_size}, tubelet=({self.tubelet_size}, {self.patch_size}, {self.patch_size})'


__all__ = ['POOLS', 'VideoTransformer']
