_base_ = ['./vit_tiny_shapes2d_position.py']
model = dict(backbone=dict(encoding='irpe'))
