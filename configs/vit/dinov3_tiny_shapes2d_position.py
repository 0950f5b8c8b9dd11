# timm's DINOv3 architecture (vit_small_patch16_dinov3: cls and 4 register tokens, layer scale, rope_dinov3) at the
# size of the other tiny shapes2d configs (32 px, 8x8 patches of 4 px, width 64, 4 blocks, 4 heads), from scratch.
# The same backbone dict with pretrained=True and pretrained_cfg_overlay=dict(file=...) fine-tunes DINOv3 weights
# (see vit_small_dinov3_imagefolder.py); model.backbone.rope_rescale_coords=2 turns on DINOv3's box augmentation.
_base_ = ['./vit_tiny_shapes2d_position.py']
model = dict(
    backbone=dict(
        model_name='vit_small_patch16_dinov3',
        encoding='default',  # the model's own rope_dinov3 (another name swaps it, weights kept)
        global_pool='token',  # DINOv3 classifies from its cls token (timm's default here is 'avg')
    )
)
