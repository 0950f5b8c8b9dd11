# DiT's optimisation: AdamW, constant lr 1e-4, no weight decay, EMA of the weights (decay 0.9999 = mmengine
# momentum 1e-4; the EMA weights are what checkpoints hold in 'state_dict'). Iteration-based.
max_iters = 400000
# The constructor reads the model's no-decay declaration, so a --cfg-options optim_wrapper.optimizer.weight_decay=...
# decays only what the encodings and the backbone leave to it.
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='ParamGroupsOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.0),
)
param_scheduler = []
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict()
test_cfg = dict()
custom_hooks = [dict(type='EMAHook', momentum=1e-4, update_buffers=True, priority='ABOVE_NORMAL')]
