# Tiny point transformer on primitives3d with Point-MAE's point_mlp encoding, about 15 minutes on 2 CPU cores
# (20 epochs of 125 iterations). Other encodings: the point_tiny_<encoding>_primitives3d.py leaves, or
# --cfg-options model.backbone.encoding=NAME (python -c "import vispe; print(vispe.list_encodings(ndim=3))").
_base_ = [
    '../_base_/models/point_tiny.py',
    '../_base_/datasets/primitives3d.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
max_epochs = 20
train_cfg = dict(max_epochs=max_epochs, val_interval=5)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0, end=1, convert_to_iter_based=True),
    # no end: the Runner ends the decay with the run, so --cfg-options train_cfg.max_epochs=N still decays to eta_min
    dict(type='CosineAnnealingLR', by_epoch=True, begin=1, eta_min=1e-5, convert_to_iter_based=True),
]
