# shapes2d 'position' task: which cell of a 3x3 grid holds the object, times its shape (27 classes).
train_resolution = 32
shapes2d = dict(type='Shapes2D', task='position', image_size=train_resolution, seed=0)

train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes2d, split='train', num_samples=6000),
)
val_dataloader = dict(
    batch_size=128,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes2d, split='val', num_samples=1000),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy')
test_evaluator = val_evaluator
