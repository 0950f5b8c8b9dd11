# PRoPE (Li et al. 2025): each view's projection P = K' E on half of each head's channels, GTA-style (q by P^T, k and
# v by P^-1, the output by P), RoPE of the patch position on the other half; K' is K normalised by the image size, so
# the 48 px setting sees the same K' for the same field of view (its RoPE half counts patches: 12 x 12 there, trained
# at 8 x 8). No parameters (see vispe/encodings/prope.py).
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding='prope'))
