# ShapesVideo: procedural clips of moving, turning and flashing shapes (vispe.datasets.shapes_video), 8 frames of
# 32 px. Pick the task with shapes_video's task: direction (4), first_mover (2), count (3), half (2).
train_frames = 8
train_resolution = 32
# cache: each clip is rendered once and kept in memory (200 MB for the 2,000 training clips), so the epochs after the
# first, and every strategy after the first in a sweep's setting, skip the rendering (a third of a CPU step)
shapes_video = dict(
    type='ShapesVideo', task='direction', num_frames=train_frames, image_size=train_resolution, seed=0, cache=True
)

train_dataloader = dict(
    batch_size=32,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes_video, split='train', num_samples=2000),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes_video, split='val', num_samples=400),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy')
test_evaluator = val_evaluator
