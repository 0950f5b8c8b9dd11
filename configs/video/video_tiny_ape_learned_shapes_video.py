# The tiny space-time ViT with a learned (t, h, w) table (ViViT / VideoMAE's absolute baseline).
_base_ = ['./video_tiny_rope_axial_shapes_video.py']
model = dict(backbone=dict(encoding='ape_learned'))
