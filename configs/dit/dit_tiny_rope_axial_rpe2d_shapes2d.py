# DiT-Ti/4 with rope_axial trained as RPE-2D describes: per sample, sorted random token positions from the enlarged
# range [0, 16) per axis (16 = the 64 px grid, 2x the training one), random crops of the scene (a quarter of its area
# up to all of it) rendered at 32 px, and the crop box as a micro-condition. At sampling time the positions are the
# plain grid and the crop is the full image (0, 0, 1, 1): sample with --strategy none.
_base_ = ['./dit_tiny_shapes2d.py']
model = dict(
    backbone=dict(
        encoding='rope_axial',
        position_sampler=dict(type='rpe2d', max_grid=(16, 16)),
        crop_condition=True,
    )
)
train_dataloader = dict(dataset=dict(crop_scale=(0.25, 1.0)))
