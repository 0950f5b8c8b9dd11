# Tiny multi-view transformer on multiview scenes without camera information (the baseline the task is built to
# defeat); the multiview_tiny_<encoding>_scenes.py leaves add plucker, petr or gta, or use
# --cfg-options model.backbone.encoding=NAME; the names it accepts:
# python -c "from vispe.backbones.multiview import multiview_encodings; print(multiview_encodings())"
_base_ = [
    '../_base_/models/multiview_tiny.py',
    '../_base_/datasets/multiview_scenes.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs, val_interval=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0, end=1, convert_to_iter_based=True),
    # no end: the Runner ends the decay with the run, so --cfg-options train_cfg.max_epochs=N still decays to eta_min
    dict(type='CosineAnnealingLR', by_epoch=True, begin=1, eta_min=1e-5, convert_to_iter_based=True),
]
