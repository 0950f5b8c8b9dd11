# AdamW with a one-epoch linear warm-up and cosine decay. Weight decay follows the model's declaration (vispe's
# ParamGroupsOptimWrapperConstructor): each encoding's no_weight_decay_params, the backbone's tokens and tables,
# and no decay on 1-D parameters and biases. Layer-wise lr decay (BEiT): paramwise_cfg=dict(layer_decay_rate=0.65),
# e.g. --cfg-options optim_wrapper.paramwise_cfg.layer_decay_rate=0.65.
max_epochs = 30
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='ParamGroupsOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0, end=1, convert_to_iter_based=True),
    # no end: the Runner ends the decay with the run, so --cfg-options train_cfg.max_epochs=N still decays to eta_min
    dict(type='CosineAnnealingLR', by_epoch=True, begin=1, eta_min=1e-5, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
