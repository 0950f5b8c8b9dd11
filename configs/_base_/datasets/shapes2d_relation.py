# shapes2d 'relation' task: direction from the red object to the blue one (right, down, left, up; 4 classes).
_base_ = ['./shapes2d_position.py']
shapes2d = dict(type='Shapes2D', task='relation', image_size=32, seed=0)
train_dataloader = dict(dataset=dict(shapes2d, split='train', num_samples=6000))
val_dataloader = dict(dataset=dict(shapes2d, split='val', num_samples=1000))
test_dataloader = val_dataloader
