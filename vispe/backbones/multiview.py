"""A multi-view transformer: V views through one shared patch embedding, joint attention over all views' tokens, and
positions that carry each token's view and camera (``vispe.positions.Cameras``). Camera encodings see every token with
its camera; image encodings work per view (embed ones on each view's grid, rotary ones by each token's (row, col) in
its view); encodings that need one grid (peg, lepe, irpe) are refused."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from timm.layers import PatchEmbed
from torch import Tensor, nn

from vispe.backbones.base import PEBackbone, backbone_encodings, pe_blocks
from vispe.backbones.common import check_img_size, check_input_dtype, check_patch_multiple, check_rates, use_patch_conv
from vispe.encodings.build import EncodingSpec
from vispe.positions import Cameras, Positions, grid_coords, grid_positions
from vispe.registry import MODELS

#: hooks an encoding may use here: per-view grids and all tokens together only meet in these (gta's value
#: transforms act token by token, like its rotation)
SUPPORTED_HOOKS = frozenset({'embed', 'rotate', 'transform_v', 'transform_out'})


def multiview_encodings() -> list[str]:
    """Names of the encodings the multi-view transformer accepts."""
    return backbone_encodings(ndim=2, cameras=True, hooks=SUPPORTED_HOOKS)


@MODELS.register_module()
class MultiViewTransformer(PEBackbone):
    """Joint attention over the patch tokens of V views, mean-pooled into ``num_outputs`` values.

    Args:
        num_outputs: outputs of the head.
        encoding: vispe encoding spec (camera and per-view image encodings).
        img_size: training image size (H, W or one int).
        patch_size: the patch side p.
        in_chans: channels of each view.
        embed_dim: model width.
        depth: blocks.
        num_heads: attention heads, dividing embed_dim.
        mlp_ratio: MLP width over embed_dim.
        drop_path_rate: stochastic depth of the last block, rising linearly from 0.

    ``forward(images, K, cam_to_world, depth=None)``: images (B, V, C, H, W), intrinsics (B, V, 3, 3) in pixels,
    camera-to-world poses (B, V, 4, 4), optional depth maps (B, V, 1, H, W) (0: no surface) -> (B, num_outputs). No cls
    token, so a world-frame-invariant encoding (gta, relative plucker) makes the model invariant.
    """

    #: the hooks it serves (readers elsewhere, such as show-encoding's camera rig, take them from here)
    supported_hooks = SUPPORTED_HOOKS

    #: the shared patch embedding (layer 0 of layer-wise lr decay, with the model-level encodings)
    stem_prefixes = ('patch_embed',)

    def __init__(
        self,
        num_outputs: int = 3,
        encoding: EncodingSpec = None,
        img_size: int | tuple[int, int] = 32,
        patch_size: int = 4,
        in_chans: int = 3,
        embed_dim: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        drop_path_rate: float = 0.0,
    ) -> None:
        super().__init__()
        check_img_size('MultiViewTransformer', img_size, patch_size, patch_pair=False)
        check_rates('MultiViewTransformer', drop_path_rate=drop_path_rate)
        self.patch_size = patch_size
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim, strict_img_size=False)
        use_patch_conv(self.patch_embed)
        per_layer = self.build_encodings(
            encoding,
            embed_dim,
            num_heads,
            depth,
            self.patch_embed.grid_size,
            ndim=2,
            cameras=True,
            hooks=SUPPORTED_HOOKS,
            patch_size=patch_size,
        )
        self.blocks = pe_blocks(embed_dim, num_heads, mlp_ratio, drop_path_rate, per_layer)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_outputs)

    def positions(self, images: Tensor, K: Tensor, cam_to_world: Tensor, depth: Tensor | None = None) -> Positions:
        """Every token's (row, col) in its view's grid, view-major, with the cameras and optional per-token depth."""
        B, V, _, H, W = images.shape
        h, w = H // self.patch_size, W // self.patch_size
        view = torch.arange(V, device=images.device).repeat_interleave(h * w)
        cameras = Cameras(
            K=K,
            cam_to_world=cam_to_world,
            view=view,
            image_size=(H, W),
            patch_size=self.patch_size,
            depth=None if depth is None else self.token_depth(depth, images.shape),
        )
        coords = grid_coords(h, w, images.device).repeat(V, 1)
        return Positions(coords=coords, cameras=cameras, key=('multiview', V, h, w))

    def token_depth(self, depth: Tensor, image_shape: Sequence[int]) -> Tensor:
        """Depth maps (B, V, [1,] H, W) -> (B, V, h, w): each token's nearest positive depth in its patch, else 0."""
        B, V, _, H, W = image_shape
        if depth.dim() == 5 and depth.shape[2] == 1:
            depth = depth[:, :, 0]
        if tuple(depth.shape) != (B, V, H, W):
            raise ValueError(
                f'depth maps must be (B, V, 1, H, W) or (B, V, H, W) like the views ({B}, {V}, {H}, {W}); got '
                f'{tuple(depth.shape)}'
            )
        p = self.patch_size
        patches = depth.float().reshape(B, V, H // p, p, W // p, p)
        nearest = torch.where(patches > 0, patches, torch.inf).amin(dim=(3, 5))
        return torch.where(torch.isfinite(nearest), nearest, torch.zeros_like(nearest))

    def check_inputs(self, images: Tensor, K: Tensor, cam_to_world: Tensor) -> None:
        """ValueError unless ``images`` (B, V, C, H, W) fit the model and the cameras' shapes."""
        if images.dim() != 5:
            raise ValueError(f'images must be (B, V, C, H, W), got shape {tuple(images.shape)}')
        in_chans = self.patch_embed.proj.weight.shape[1]
        if images.shape[2] != in_chans:
            raise ValueError(
                f'MultiViewTransformer: images {tuple(images.shape)} have {images.shape[2]} channel(s) per view, but '
                f'the model takes {in_chans}; give (B, V, {in_chans}, H, W) views or build it with in_chans='
                f'{images.shape[2]}'
            )
        check_input_dtype('MultiViewTransformer', images, self.patch_embed.proj.weight)
        B, V, _, H, W = images.shape
        if K.shape != (B, V, 3, 3) or cam_to_world.shape != (B, V, 4, 4):
            raise ValueError(
                f'for {B} x {V} views, K must be ({B}, {V}, 3, 3) and cam_to_world ({B}, {V}, 4, 4); got '
                f'{tuple(K.shape)} and {tuple(cam_to_world.shape)}'
            )
        check_patch_multiple('MultiViewTransformer', (H, W), (self.patch_size, self.patch_size))

    def tokens(
        self, images: Tensor, K: Tensor, cam_to_world: Tensor, depth: Tensor | None = None
    ) -> tuple[Tensor, Positions]:
        """The views and cameras -> tokens (B, V * N, D), view-major, embed hooks applied, and their positions."""
        self.check_inputs(images, K, cam_to_world)
        B, V, _, H, W = images.shape
        pos = self.positions(images, K, cam_to_world, depth)
        x = self.patch_embed(images.flatten(0, 1))  # (B V, N, D)
        view_pos: Positions | None = None
        # the stack picks the embed encodings; this loop only says which tokens each one sees (not
        # ``EncodingStack.embed``): by its class's capability ``needs_cameras``, a camera encoding sees all views at
        # once with their cameras, an image one each view's grid
        for enc in self.encoding_stack.with_hook('embed'):
            if enc.needs_cameras:
                x = enc.embed(x.reshape(B, -1, x.shape[-1]), pos)
            else:  # an image encoding, on each view's grid
                view_pos = view_pos or grid_positions(H // self.patch_size, W // self.patch_size, device=x.device)
                x = enc.embed(x.reshape(B * V, -1, x.shape[-1]), view_pos)
        return x.reshape(B, -1, x.shape[-1]), pos

    def forward_features(self, images: Tensor, K: Tensor, cam_to_world: Tensor, depth: Tensor | None = None) -> Tensor:
        """-> normalised tokens (B, V * N, D), view-major."""
        return self.norm(self.encode(images, K, cam_to_world, depth))

    def forward(self, images: Tensor, K: Tensor, cam_to_world: Tensor, depth: Tensor | None = None) -> Tensor:
        return self.forward_with_losses(images, K, cam_to_world, depth)[0]

    def forward_with_losses(
        self, images: Tensor, K: Tensor, cam_to_world: Tensor, depth: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``forward`` and the auxiliary losses its encodings computed (``Positions.aux_losses``)."""
        x, pos = self.tokens(images, K, cam_to_world, depth)
        out = self.head(self.norm(self.run_blocks(x, pos)).mean(dim=1))
        return out, dict(pos.aux_losses)


__all__ = ['MultiViewTransformer', 'multiview_encodings']
