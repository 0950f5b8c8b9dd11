# prope with relative Plucker rays. PRoPE's attention sees the cameras only through the relative transforms
# P_q P_k^-1 between views (within a view they are the identity), where view 0's intrinsics are mixed with view 1's
# and with the relative pose; the demo's answer, a metric point in view 0's frame with a focal length drawn per view,
# needs them on their own. The rays hand each token its own.
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding=['prope', dict(type='plucker', relative=True)]))
