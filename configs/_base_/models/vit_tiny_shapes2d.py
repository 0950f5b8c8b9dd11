# A tiny ViT for 32 px shapes2d images on CPU: 8x8 patches of 4 px, width 64, 4 blocks, 4 heads.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        model_name='vit_tiny_patch16_224',
        encoding='ape_learned',
        img_size=32,
        patch_size=4,
        embed_dim=64,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
        num_classes=27,
    ),
)
