# PETR's frustum embedding with poses relative to the first view (as the plucker leaf). In that frame the scene sits
# about 3-4.5 units ahead of camera 0, so the normalisation box spans x, y in [-4, 4] and z in [0, 8].
_base_ = ['./multiview_tiny_scenes.py']
model = dict(
    backbone=dict(
        encoding=dict(
            _delete_=True,
            type='petr',
            relative=True,
            depth_range=(1.0, 8.0),
            scene_range=(-4.0, -4.0, 0.0, 4.0, 4.0, 8.0),
        )
    )
)
