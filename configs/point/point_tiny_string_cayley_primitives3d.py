# The tiny point transformer with Cayley-STRING on the group centres (3D, rope3d's frequencies underneath; learned
# frame P per layer and head, identity at init, foldable into q/k with vispe.encodings.string.fold_string after training).
_base_ = ['./point_tiny_primitives3d.py']
model = dict(backbone=dict(encoding='string_cayley'))
