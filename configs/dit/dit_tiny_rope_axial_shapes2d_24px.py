# DiT-Ti/3 with rope_axial on shapes2d 'shape_color' at 24 px (8 x 8 tokens of 3 px, the 32 px demo's token count),
# 12,000 iterations at batch 32: the smallest setting found so far whose samples show the five shapes on a CPU
# (issue 42, the base for the DyPE sweep). Measured with two such runs sharing a 2-core CPU, one thread each:
# 42.5 min of training. Sampled at 24 px (eval_generation, 8 per class, strategy none, the shipped classifier):
# count 96.3%, colour 96.3%, shape 65.0% (chance 20%), FD 10.3. The same run at 6,000 iterations: shape 22.5%
# (blobs), as the 32 px demo at 6,000.
_base_ = ['./dit_tiny_rope_axial_shapes2d.py']
max_iters = 12000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
train_resolution = 24
shapes2d = dict(type='Shapes2D', task='shape_color', image_size=train_resolution, seed=0)
model = dict(backbone=dict(img_size=train_resolution, patch_size=3))
train_dataloader = dict(dataset=dict(shapes2d, split='train', num_samples=20000))
val_dataloader = dict(dataset=dict(shapes2d, split='val', num_samples=512))
test_dataloader = val_dataloader
