# 3DPPE (Shu et al. 2023): each token embedded at one point of its ray, at the depth a small head predicts from its
# patch (trained on the scenes' rendered depth through loss_depth, beside the localisation loss), poses relative to
# the first view and the same box and depth range as the petr leaf, for a side-by-side comparison with PETR's rays.
_base_ = ['./multiview_tiny_scenes.py']
model = dict(
    backbone=dict(
        encoding=dict(
            _delete_=True,
            type='3dppe',
            depth_source='predicted',
            relative=True,
            depth_range=(1.0, 8.0),
            scene_range=(-4.0, -4.0, 0.0, 4.0, 4.0, 8.0),
        )
    )
)
