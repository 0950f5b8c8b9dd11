# Tiny ViT on shapes2d 'relation', trained at random aspect ratios within the fixed training's token budget (NaFlex
# style): each image its own aspect ratio W / H, log-uniform in [1/3, 3], at the largest 4 px patch grid of that
# ratio with at most 64 tokens; a batch of mixed sizes goes to the ViT as a list (padded). Validation stays at 32 px.
# The leaderboard's 'aspect' regime (tools/leaderboard.py --regimes).
_base_ = ['./vit_tiny_shapes2d_relation.py']

model = dict(backbone=dict(mixed_sizes='pad'))
size_policy = dict(type='RandomAspect', patch_size=4, max_tokens=64, max_ratio=3.0)
train_dataloader = dict(
    collate_fn=dict(type='vispe.mixed_size_collate'),
    dataset=dict(size_policy=size_policy),
)
