# Fine-tune DINOv3 ViT-S/16 on your own images (an ImageFolder tree, as vit_tiny_imagefolder.py): timm's
# vit_small_patch16_dinov3 converted by vispe (rope_dinov3, cls and 4 register tokens, layer scale), its weights read
# from a local file, since nothing is downloaded: timm's state dict of the model, or DINOv3's own release file
# (dinov3_vits16_pretrain_lvd1689m-*.pth; timm's loader converts its keys). Set weights below, then
#   python tools/train.py configs/vit/vit_small_dinov3_imagefolder.py --cfg-options model.backbone.num_classes=5
# The pretrained config's preprocessing is DINOv3's (ImageNet mean / std). Layer-wise lr decay and a lower lr than
# training from scratch; DINOv3's coordinate augmentation is off, as in timm's model: turn it on with
# --cfg-options model.backbone.rope_rescale_coords=2.
_base_ = ['./vit_tiny_imagefolder.py']
weights = 'checkpoints/dinov3_vits16.pth'
train_resolution = 224
folder = dict(type='ImageFolderDataset', data_root='data/my_images', image_size=train_resolution, normalize=True)
train_dataloader = dict(batch_size=32, dataset=dict(folder, split='train'))
val_dataloader = dict(dataset=dict(folder, split='val', augment=False))
test_dataloader = val_dataloader
model = dict(
    backbone=dict(
        _delete_=True,
        model_name='vit_small_patch16_dinov3',
        pretrained=True,
        pretrained_cfg_overlay=dict(file=weights),
        img_size=train_resolution,
        num_classes=10,  # your number of classes
        global_pool='token',
        drop_path_rate=0.1,
    )
)
optim_wrapper = dict(optimizer=dict(lr=1e-4), paramwise_cfg=dict(layer_decay_rate=0.75))
