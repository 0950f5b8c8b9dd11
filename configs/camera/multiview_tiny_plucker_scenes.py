_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding='plucker'))
