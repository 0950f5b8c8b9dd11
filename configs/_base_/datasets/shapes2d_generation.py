# shapes2d 'shape_color' for class-conditional generation: one object, 20 classes (4 colours x 5 shapes), [-1, 1].
train_resolution = 32
shapes2d = dict(type='Shapes2D', task='shape_color', image_size=train_resolution, seed=0)

train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes2d, split='train', num_samples=20000),
)
# held-out denoising loss (fixed noise and stratified times, so checkpoints compare)
val_dataloader = dict(
    batch_size=128,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(shapes2d, split='val', num_samples=512),
)
test_dataloader = val_dataloader
val_evaluator = dict(type='DenoisingLoss')
test_evaluator = val_evaluator

# tools/eval_generation.py: the feature extractor for FD / KID, shipped in the model zoo (retrain it with its config)
generation_eval = dict(
    classifier_config='configs/dit/classifier_shapes2d_shape_color.py',
    classifier_checkpoint='models/vit_tiny_ape_sincos_shapes2d_shape_color/vit_tiny_ape_sincos_shapes2d_shape_color.pth',
    real_split='test',
    steps=25,
    sampler='heun',
    cfg_scale=1.5,
)
