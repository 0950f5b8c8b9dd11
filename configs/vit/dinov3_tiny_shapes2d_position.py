# timm's DINOv3 architecture (vit_small_patch16_dinov3: cls and 4 register tokens, layer scale, rope_dinov3) at the
# tiny size of the other shapes2d configs (32 px, 8x8 patches of 4 px, width 64, 4 blocks, 4 heads), from scratch.
# The same backbone dict with pretrained=True and pretrained_cfg_overlay=dict(file=...) fine-tunes DINOv3 weights
# (see vit_small_dinov3_imagefolder.py); model.backbone.rope_rescale_coords=2 turns on DINOv3's box augmentation.
_base_ = [
    '../_base_/datasets/shapes2d_position.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
model = dict(
    type='ImageClassifier',
    backbone=dict(
        model_name='vit_small_patch16_dinov3',
        img_size=32,
        patch_size=4,
        embed_dim=64,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
        num_classes=27,
        global_pool='token',  # DINOv3 classifies from its cls token (timm's default here is 'avg')
    ),
)
