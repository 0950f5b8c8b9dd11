# Tiny ViT on shapes2d 'position'; pick the encoding with --cfg-options model.backbone.encoding=NAME,
# or use one of the vit_tiny_<encoding>_shapes2d_position.py leaves.
_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/datasets/shapes2d_position.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
