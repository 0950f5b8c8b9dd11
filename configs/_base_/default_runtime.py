# Runtime settings shared by every vispe config.
default_scope = 'vispe'

default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=20),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=2, save_last=True),
    sampler_seed=dict(type='DistSamplerSeedHook'),
)

# dist backend: tools/train.py picks nccl on GPU and gloo on CPU unless a config sets it.
env_cfg = dict(cudnn_benchmark=False, mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0), dist_cfg=dict())

log_processor = dict(by_epoch=True, window_size=20)
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=0, deterministic=False)
