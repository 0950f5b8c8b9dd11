# Tiny ViT classifier on shapes2d 'shape_color' (20 classes: red / green / blue / yellow x five shapes): the feature
# extractor for FD and KID of DiT samples, vispe.evaluation.generation_metrics.ShapesFeatures(classifier). It must be
# accurate at every size the DiTs are sampled at, so it trains on all of them: images rendered at 64 px, each batch
# resized to 32, 48 or 64 px (MultiScaleDataPreprocessor). ape_sincos is computed from the token grid (patches of
# 4 px), so one set of weights takes the three sizes.
_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/datasets/shapes2d_position.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
train_resolution = 64
shapes2d = dict(type='Shapes2D', task='shape_color', image_size=train_resolution, seed=0)
train_dataloader = dict(dataset=dict(shapes2d, split='train', num_samples=10000))
val_dataloader = dict(dataset=dict(shapes2d, image_size=32, split='val', num_samples=1000))
test_dataloader = val_dataloader
model = dict(
    backbone=dict(encoding='ape_sincos', num_classes=20),
    data_preprocessor=dict(type='MultiScaleDataPreprocessor', sizes=(32, 48, 64)),
)
