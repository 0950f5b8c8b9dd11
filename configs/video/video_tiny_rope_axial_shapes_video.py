# The tiny space-time ViT on ShapesVideo's direction task (which way the coloured shape moves) with 3D axial RoPE.
# Other encodings: --cfg-options model.backbone.encoding=NAME; other tasks: the leaves beside this one.
_base_ = [
    '../_base_/models/video_tiny.py',
    '../_base_/datasets/shapes_video.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
max_epochs = 10
train_cfg = dict(max_epochs=max_epochs, val_interval=5)
