# Tiny ViT on LOOPE's Three-Cell benchmark (shapes2d 'three_cell_loope', 6 classes): 56 px images in 4 px patches,
# the paper's 14 x 14 tokens; pick the encoding with --cfg-options model.backbone.encoding=NAME ('none': no PE).
_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/datasets/shapes2d_three_cell_loope.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
model = dict(backbone=dict(img_size=56, num_classes=6))
