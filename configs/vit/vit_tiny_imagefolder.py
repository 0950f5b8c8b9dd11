# Tiny ViT/8 on your own images: an ImageFolder tree (data_root/train/<class>/<images>, data_root/val/<class>/...;
# see README "Train on your own images" and data/README.md), at 64 px (8x8 patches of 8 px), ImageNet mean / std.
# Put (or link) your tree at data/my_images and set num_classes to the number of class folders (a mismatch is refused
# before the first step, naming the count):
#   ln -s /path/to/flowers data/my_images
#   python tools/train.py configs/vit/vit_tiny_imagefolder.py --cfg-options model.backbone.num_classes=5
# Elsewhere: edit data_root below, or --cfg-options data_root=D (a top-level variable given that way is applied where
# it is defined, so every loader built from it follows).
_base_ = [
    '../_base_/models/vit_tiny_shapes2d.py',
    '../_base_/schedules/adamw_short.py',
    '../_base_/default_runtime.py',
]
data_root = 'data/my_images'
train_resolution = 64

# Training augmentation: timm's create_transform (vispe.datasets.augment); any of its training arguments may be set
# here: scale, ratio, hflip, vflip, color_jitter, auto_augment ('rand-m9-mstd0.5', 'augmix-m5-w3', 'original'),
# re_prob / re_mode / re_count (random erasing), grayscale_prob, gaussian_blur_prob. These are vispe's defaults,
# gentler than ImageNet's (scale 0.08-1, colour jitter 0.4), so small images survive; for digits or text set hflip=0.
augment = dict(scale=(0.5, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), hflip=0.5, auto_augment=None, re_prob=0.0)
folder = dict(type='ImageFolderDataset', data_root=data_root, image_size=train_resolution, normalize=True)

train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(folder, split='train', augment=augment),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(folder, split='val', augment=False),  # resize the short side, centre crop
)
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy')
test_evaluator = val_evaluator
model = dict(backbone=dict(img_size=train_resolution, patch_size=8, num_classes=10))  # your number of classes
