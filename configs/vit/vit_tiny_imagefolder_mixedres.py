# vit_tiny_imagefolder.py trained NaFlex-style: every image keeps its own aspect ratio (the random crop's ratio
# range is relative to it) and is scaled to the largest grid of 8 px patches within a token budget drawn per batch
# from 16, 36 and 64 tokens (up to 64 x 64 px for a square image, 48 x 80 for a 3:5 one). Batches of mixed sizes go
# to the ViT as lists of images. Validation: each image at its own aspect ratio within 64 tokens.
#   python tools/train.py configs/vit/vit_tiny_imagefolder_mixedres.py --cfg-options model.backbone.num_classes=5
# FlexiViT-style square sizes instead: "train_dataloader.dataset.size_policy={'type': 'SquareSizes',
#   'min_size': 32, 'max_size': 64, 'patch_size': 8}"; one draw per image: train_dataloader.batch_sampler=None.
_base_ = ['./vit_tiny_imagefolder.py']

train_dataloader = dict(
    batch_sampler=dict(type='SharedSizeBatchSampler'),  # one token budget per batch
    collate_fn=dict(type='vispe.mixed_size_collate'),
    dataset=dict(size_policy=dict(type='NativeAspect', patch_size=8, max_tokens=(16, 36, 64))),
)
val_dataloader = dict(
    collate_fn=dict(type='vispe.mixed_size_collate'),
    dataset=dict(size_policy=dict(type='NativeAspect', patch_size=8, max_tokens=64)),
)
test_dataloader = val_dataloader
