# 3DPPE with the scenes' rendered depth instead of a predicted one: the encoding with perfect depth, the upper bound
# of multiview_tiny_3dppe_scenes.py (the test views carry their depth maps too).
_base_ = ['./multiview_tiny_3dppe_scenes.py']
model = dict(backbone=dict(encoding=dict(depth_source='gt')))
