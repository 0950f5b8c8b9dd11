# The tiny point transformer with Cayley-STRING on the group centres (3D, rope3d's frequencies underneath; a learned
# frame P per layer and head, identity at init; vispe.encodings.string.fold_string folds it into q/k after training).
_base_ = ['./point_tiny_primitives3d.py']
model = dict(backbone=dict(encoding='string_cayley'))
