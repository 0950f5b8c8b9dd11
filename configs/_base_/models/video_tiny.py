# A tiny space-time ViT for CPU: 32 px frames in 4 px patches, tubelets of 2 frames (8 frames: a 4x8x8 token grid),
# width 128, 4 blocks of 4 heads (head dim 32). Pick the encoding with model.backbone.encoding
# (python -c "import vispe; print(vispe.list_encodings(ndim=3))").
model = dict(
    type='VideoClassifier',
    backbone=dict(
        type='VideoTransformer',
        encoding='rope_axial',
        num_classes=4,
        img_size=32,
        num_frames=8,
        patch_size=4,
        tubelet_size=2,
        embed_dim=128,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
        drop_path_rate=0.1,
    ),
)
