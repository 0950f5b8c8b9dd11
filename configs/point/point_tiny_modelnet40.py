# Tiny point transformer on ModelNet40 read from disk (data/README.md), 1024 points per cloud, rope3d. The clouds
# are normalised into the unit sphere, so neighbouring group centres sit about 0.25 apart (measured on
# primitives3d clouds so normalised): freq_scale 4.
_base_ = [
    '../_base_/models/point_tiny.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
train_points = 1024
model = dict(
    backbone=dict(num_classes=40, group_size=32, encoding=dict(_delete_=True, type='rope3d', freq_scale=4.0)),
)
modelnet40 = dict(type='ModelNet40', data_root='data/modelnet40_normal_resampled', num_points=train_points)
train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(modelnet40, split='train'),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=2,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(modelnet40, split='test'),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy')
test_evaluator = val_evaluator
point_eval = dict(points=[train_points, 2 * train_points, 4 * train_points], scales=[1.0, 1.5, 2.0])
