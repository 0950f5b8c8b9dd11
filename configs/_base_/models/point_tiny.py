# A tiny Point-MAE-style transformer for CPU: 64 groups of 16 points, width 128, 4 blocks of 4 heads, a 32-wide
# mini-PointNet (Point-MAE: 64 x 32, 384, 12 x 6, 128). Pick the encoding with model.backbone.encoding.
model = dict(
    type='PointClassifier',
    backbone=dict(
        type='PointTransformer',
        encoding='point_mlp',
        num_classes=10,
        num_groups=64,
        group_size=16,
        embed_dim=128,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
        drop_path_rate=0.1,
        group_hidden=32,
    ),
)
