# gta with relative Plucker rays: gta's attention sees relative poses and relative patch positions but neither the
# intrinsics nor where a patch sits in its image, both of which the rays carry (each view has its own focal length).
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding=['gta', dict(type='plucker', relative=True)]))
