# DiT-Ti/3 with rope_axial on shapes2d 'shape_color' at 24 px (8 x 8 tokens of 3 px, the 32 px demo's token count),
# 12,000 iterations at batch 32: the smallest setting found so far whose samples show the five shapes on a CPU
# (issue 42, the base of the DyPE sweep in docs/results/other-demos.md). Sampled at 24 px (eval_generation, 8 per
# class, strategy none, the shipped classifier), two trainings of this config on two machines (CPU training is not
# bit-identical across machines): count 96.3% / 96.9%, shape 65.0% / 73.1% (chance 20%), FD 10.3 / 8.6. At 9,000
# iterations (the second run's checkpoint): count 99.4%, shape 50.0%, FD 12.8; at 6,000 (the first's): shape 22.5%,
# blobs, as the 32 px demo at 6,000. Time on a 2-core CPU: alone with 2 threads 0.16-0.18 s an iteration (about 25
# min for 9,000, 33 for 12,000), so 9,000 iterations learn the shapes within 30 minutes; with one thread while other
# runs used the second core, median 0.239 s (51 min for 12,000). The second run: tools/train.py CONFIG --work-dir DIR
# --cfg-options default_hooks.checkpoint.interval=3000 default_hooks.checkpoint.max_keep_ckpts=5 (keeps 9,000).
_base_ = ['./dit_tiny_rope_axial_shapes2d.py']
max_iters = 12000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
train_resolution = 24
shapes2d = dict(type='Shapes2D', task='shape_color', image_size=train_resolution, seed=0)
model = dict(backbone=dict(img_size=train_resolution, patch_size=3))
train_dataloader = dict(dataset=dict(shapes2d, split='train', num_samples=20000))
val_dataloader = dict(dataset=dict(shapes2d, split='val', num_samples=512))
test_dataloader = val_dataloader
