# prope with relative Plucker rays. PRoPE's attention sees the cameras only through relative projective transforms
# P_q P_k^-1, which no global projective change of the world alters: it cannot tell view 0's own intrinsics, which the
# demo's answer (a metric point in view 0's frame, focal length drawn per view) needs. The rays carry them.
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding=['prope', dict(type='plucker', relative=True)]))
