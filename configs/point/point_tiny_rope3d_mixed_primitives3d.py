_base_ = ['./point_tiny_primitives3d.py']
model = dict(backbone=dict(encoding=dict(_delete_=True, type='rope3d', mode='mixed')))
