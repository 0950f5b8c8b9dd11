# The config that trained vit_tiny_lff_shapes2d_relation (seed 0); tools/train.py dumped it.
default_hooks = dict(
    checkpoint=dict(
        interval=1, max_keep_ckpts=2, save_last=True, type='CheckpointHook'),
    logger=dict(interval=20, type='LoggerHook'),
    param_scheduler=dict(type='ParamSchedulerHook'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    timer=dict(type='IterTimerHook'))
default_scope = 'vispe'
env_cfg = dict(
    cudnn_benchmark=False,
    dist_cfg=dict(backend='gloo'),
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0))
launcher = 'none'
load_from = None
log_level = 'INFO'
log_processor = dict(by_epoch=True, window_size=20)
max_epochs = 30
model = dict(
    backbone=dict(
        depth=4,
        embed_dim=64,
        encoding=dict(type='lff', normalize=True),  # trained on [0, 1] positions (lff's default before issue 18)
        img_size=32,
        mlp_ratio=2.0,
        model_name='vit_tiny_patch16_224',
        num_classes=4,
        num_heads=4,
        patch_size=4),
    type='ImageClassifier')
optim_wrapper = dict(
    optimizer=dict(lr=0.001, type='AdamW', weight_decay=0.05),
    paramwise_cfg=dict(
        bias_decay_mult=0.0,
        custom_keys=dict({
            '.freqs': dict(decay_mult=0.0),
            'cls_token': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.0)
        }),
        norm_decay_mult=0.0),
    type='OptimWrapper')
param_scheduler = [
    dict(
        begin=0,
        by_epoch=True,
        convert_to_iter_based=True,
        end=1,
        start_factor=0.01,
        type='LinearLR'),
    dict(
        begin=1,
        by_epoch=True,
        convert_to_iter_based=True,
        end=30,
        eta_min=1e-05,
        type='CosineAnnealingLR'),
]
randomness = dict(deterministic=False, seed=0)
resume = False
shapes2d = dict(image_size=32, seed=0, task='relation', type='Shapes2D')
test_cfg = dict()
test_dataloader = dict(
    batch_size=128,
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        image_size=32,
        num_samples=1000,
        seed=0,
        split='val',
        task='relation',
        type='Shapes2D'),
    num_workers=0,
    sampler=dict(shuffle=False, type='DefaultSampler'))
test_evaluator = dict(type='Accuracy')
train_cfg = dict(by_epoch=True, max_epochs=30, val_interval=30)
train_dataloader = dict(
    batch_size=64,
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        image_size=32,
        num_samples=6000,
        seed=0,
        split='train',
        task='relation',
        type='Shapes2D'),
    num_workers=0,
    sampler=dict(shuffle=True, type='DefaultSampler'))
train_resolution = 32
val_cfg = dict()
val_dataloader = dict(
    batch_size=128,
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        image_size=32,
        num_samples=1000,
        seed=0,
        split='val',
        task='relation',
        type='Shapes2D'),
    num_workers=0,
    sampler=dict(shuffle=False, type='DefaultSampler'))
val_evaluator = dict(type='Accuracy')
