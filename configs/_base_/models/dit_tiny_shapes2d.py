# DiT-Ti/4 for 32 px shapes2d images on CPU: 8x8 tokens of 4 px, width 128, 4 adaLN-Zero blocks, 4 heads
# (vispe.backbones.dit.DIT_SIZES['Ti']), flow matching. Pick the encoding with model.backbone.encoding=NAME.
model = dict(
    type='DiffusionModel',
    objective='flow',
    backbone=dict(
        type='DiT',
        img_size=32,
        patch_size=4,
        in_chans=3,
        embed_dim=128,
        depth=4,
        num_heads=4,
        mlp_ratio=4.0,
        num_classes=20,
        class_dropout_prob=0.1,  # DiT's label dropout, for classifier-free guidance
        encoding='ape_sincos',  # DiT's own fixed 2D sin-cos
    ),
)
