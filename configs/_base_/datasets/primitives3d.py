# primitives3d: 10 procedural open3d shapes, 512 surface points, random anisotropic scale and rotation about z.
train_points = 512
primitives3d = dict(type='Primitives3D', num_points=train_points, rotation='z', sampling='uniform', seed=0)

train_dataloader = dict(
    batch_size=32,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(primitives3d, split='train', num_samples=4000),
)
val_dataloader = dict(
    batch_size=100,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(primitives3d, split='val', num_samples=1000),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy')
test_evaluator = val_evaluator

# tools/eval_points.py: test point counts (1x, 2x, 4x the training count) and object scales (1x to 2x)
point_eval = dict(points=[train_points, 2 * train_points, 4 * train_points], scales=[1.0, 1.5, 2.0])
