# DiT-Ti/4 on your own images: an ImageFolder tree on disk (data/imagefolder/{train,val}/<class>/*.png, see
# data/README.md), class-conditional, 32 px, pixels in [-1, 1]. Set num_classes to the number of class folders.
_base_ = ['./dit_tiny_shapes2d.py']
data_root = 'data/imagefolder'
folder = dict(type='ImageFolderDataset', data_root=data_root, image_size=32, normalize='symmetric', augment=False)
train_dataloader = dict(dataset=dict(_delete_=True, **folder, split='train'))
val_dataloader = dict(dataset=dict(_delete_=True, **folder, split='val'))
test_dataloader = val_dataloader
model = dict(backbone=dict(num_classes=10))
generation_eval = None  # the shapes2d object metrics and feature extractor do not apply to your images
