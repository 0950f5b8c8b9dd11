# DiT-Ti/4 with ape_sincos on shapes2d 'shape_color'.
_base_ = ['./dit_tiny_shapes2d.py']
model = dict(backbone=dict(encoding='ape_sincos'))
