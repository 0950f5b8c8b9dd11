# Tiny ViT on shapes2d 'relation', trained on mixed resolutions (FlexiViT-style): each training batch is rendered at
# one square side drawn uniformly from 16, 20, ..., 64 px (multiples of the 4 px patch), so a batch stacks.
# Validation stays at 32 px. The leaderboard's 'sizes' regime (tools/leaderboard.py --regimes).
_base_ = ['./vit_tiny_shapes2d_relation.py']

size_policy = dict(type='SquareSizes', min_size=16, max_size=64, patch_size=4)
train_dataloader = dict(
    batch_sampler=dict(type='SharedSizeBatchSampler'),  # one size per batch; None: one per image
    collate_fn=dict(type='vispe.mixed_size_collate'),
    dataset=dict(size_policy=size_policy),
)
