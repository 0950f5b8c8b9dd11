# shapes2d 'three_cell_loope': LOOPE's Three-Cell benchmark as vispe rebuilds it (vispe.datasets.three_cell): three
# pure-colour cells of a 14 x 14 grid; 6 classes = the colours' order by distance from the centre. 56 px with 4 px
# patches gives the paper's 14 x 14 tokens (one cell, one patch) at a CPU's cost; 224 px with 16 px patches gives the
# same tokens.
_base_ = ['./shapes2d_position.py']
train_resolution = 56
shapes2d = dict(type='Shapes2D', task='three_cell_loope', image_size=train_resolution, seed=0)
train_dataloader = dict(dataset=dict(shapes2d, split='train', num_samples=6000))
val_dataloader = dict(dataset=dict(shapes2d, split='val', num_samples=1000))
test_dataloader = val_dataloader
