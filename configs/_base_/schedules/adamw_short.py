# AdamW with a one-epoch linear warm-up and cosine decay; no weight decay on positional tables and frequencies.
max_epochs = 30
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.freqs': dict(decay_mult=0.0),  # rope_mixed frequencies
            '.comrope_': dict(decay_mult=0.0),  # ComRoPE generators: decay would shrink every rotation
            '.harope.sigma': dict(decay_mult=0.0),  # HARoPE singular values: decay would pull them off 1
            'pos_embed': dict(decay_mult=0.0),
            'cls_token': dict(decay_mult=0.0),
        },
    ),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0, end=1, convert_to_iter_based=True),
    # no end: the Runner ends the decay with the run, so --cfg-options train_cfg.max_epochs=N still decays to eta_min
    dict(type='CosineAnnealingLR', by_epoch=True, begin=1, eta_min=1e-5, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
