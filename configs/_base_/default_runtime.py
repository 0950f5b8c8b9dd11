# Runtime settings shared by every vispe config.
default_scope = 'vispe'
# VispeRunner: mmengine's Runner with strict checkpoint loading (load_strict=False, or --non-strict, loads what fits
# and lists what it left), a locked work dir, resumes checked before anything is written, and schedules that must
# fit the run's length (see vispe/engine/runner.py).
runner_type = 'VispeRunner'
load_strict = True

# AtomicCheckpointHook: mmengine's CheckpointHook with atomic writes (a killed run resumes from a whole checkpoint);
# rng_state: the random generators saved and restored with checkpoints (a resumed run continues bit for bit);
# nonfinite_loss: stop at the first NaN / Inf loss, naming the iteration and the last good checkpoint;
# skipped_samples: report the unreadable samples a data set built with on_error='skip' skipped;
# run_meta: the training data set's image size / point count in each checkpoint's meta, for the evaluation sweeps;
# class_count: refuse a classifier whose num_classes differs from its data set's classes, before the first step.
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=20),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=2, save_last=True),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    rng_state=dict(type='RNGStateHook'),
    nonfinite_loss=dict(type='NonFiniteLossHook'),
    skipped_samples=dict(type='SkippedSamplesHook'),
    run_meta=dict(type='RunMetaHook'),
    class_count=dict(type='ClassCountHook'),
)

# dist backend: tools/train.py picks nccl on GPU and gloo on CPU unless a config sets it.
env_cfg = dict(cudnn_benchmark=False, mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0), dist_cfg=dict())

log_processor = dict(by_epoch=True, window_size=20)
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=0, deterministic=False)
