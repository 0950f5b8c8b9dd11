# Tiny ViT on shapes2d 'position', trained on mixed resolutions (FlexiViT-style): each training batch is rendered at
# one square side drawn uniformly from 16, 20, ..., 64 px (multiples of the 4 px patch: 4x4 to 16x16 tokens), so a
# batch stacks. Validation stays at 32 px. Pick the encoding with --cfg-options model.backbone.encoding=NAME.
#
# Per image instead of per batch (a batch of mixed sizes, passed to the ViT as a list):
#   --cfg-options train_dataloader.batch_sampler=None
# NaFlex-style instead (shapes2d scenes are square, so the native aspect gives squares under the budget):
#   "train_dataloader.dataset.size_policy={'type': 'NativeAspect', 'patch_size': 4, 'max_tokens': [16, 64, 144, 256]}"
_base_ = ['./vit_tiny_shapes2d_position.py']

size_policy = dict(type='SquareSizes', min_size=16, max_size=64, patch_size=4)
train_dataloader = dict(
    batch_sampler=dict(type='SharedSizeBatchSampler'),  # one size per batch; None: one per image
    collate_fn=dict(type='vispe.mixed_size_collate'),  # stacks a batch of one size, else keeps a list of images
    dataset=dict(size_policy=size_policy),
)
