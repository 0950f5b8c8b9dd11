# gta with the authors' SO(2) frequencies (so2='reference', see multiview_tiny_gta_reference_scenes.py) and relative
# Plucker rays (see multiview_tiny_gta_plucker_scenes.py): the pair to set beside gta+plucker at unseen image sizes.
_base_ = ['./multiview_tiny_scenes.py']
model = dict(backbone=dict(encoding=[dict(type='gta', so2='reference'), dict(type='plucker', relative=True)]))
