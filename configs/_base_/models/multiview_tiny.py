# A tiny multi-view transformer for CPU: 4 px patches of 32 px views, width 128, 4 blocks of 4 heads, regressing the
# target's 3D centre. Pick the encoding with model.backbone.encoding.
model = dict(
    type='MultiViewLocalizer',
    backbone=dict(
        type='MultiViewTransformer',
        encoding=None,
        num_outputs=3,
        img_size=32,
        patch_size=4,
        embed_dim=128,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
        drop_path_rate=0.0,
    ),
)
