# gta with the authors' SO(2) frequencies: 2 pi 2^(j - n) on normalised patch centres (p + 0.5) / P instead of
# rope_axial's ladder on integer coordinates (see vispe/encodings/gta.py); the same point of an image gets the same
# angles at any image size, so the 48 px setting (a 12 x 12 grid, trained at 8 x 8) interpolates.
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding=[dict(type='gta', so2='reference')]))
