_base_ = ['./point_tiny_primitives3d.py']
model = dict(backbone=dict(encoding='rope3d'))
