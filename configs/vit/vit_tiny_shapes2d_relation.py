# Tiny ViT on shapes2d 'relation'; pick the encoding with --cfg-options model.backbone.encoding=NAME.
_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/datasets/shapes2d_relation.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
model = dict(backbone=dict(num_classes=4))
