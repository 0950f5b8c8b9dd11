_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/datasets/shapes2d_position.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
model = dict(backbone=dict(encoding='ape_learned'))
