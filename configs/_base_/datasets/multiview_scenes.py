# multiview scenes: 1-3 primitives, the red one's world centre is the target; 2 views of 32 px, random cameras.
train_resolution = 32
scenes = dict(type='MultiViewScenes', num_views=2, image_size=train_resolution, seed=0)

train_dataloader = dict(
    batch_size=32,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(scenes, split='train', num_samples=8000),
)
val_dataloader = dict(
    batch_size=100,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(scenes, split='val', num_samples=1000),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Localization3D', threshold=0.2)
test_evaluator = val_evaluator

# tools/eval_cameras.py: test settings never seen in training, as overrides of the test data set: other fields of
# view (focal lengths), image sizes below and above 32 px, up to 4x the training views, farther cameras
camera_eval = dict(
    settings=dict(
        train=dict(),
        fov_narrow=dict(fov_range=(25.0, 40.0)),
        fov_wide=dict(fov_range=(70.0, 90.0)),
        image_24=dict(image_size=24),
        image_48=dict(image_size=48),
        views_3=dict(num_views=3),
        views_4=dict(num_views=4),
        views_8=dict(num_views=8),
        far=dict(distance_range=(4.5, 6.0)),
    )
)
