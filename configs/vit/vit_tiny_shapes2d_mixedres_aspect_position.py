# Tiny ViT on shapes2d 'position', trained at random aspect ratios within the fixed training's token budget (NaFlex
# style): each training image gets its own aspect ratio W / H, log-uniform in [1/3, 3], and the largest 4 px patch
# grid of that ratio with at most 64 tokens (the 8 x 8 grid of the 32 px training), its scene rendered stretched to
# it. A batch of mixed sizes goes to the ViT as a list: padded to the longest image (model.backbone.mixed_sizes='pad')
# or packed ('pack'). Validation stays at 32 px. Pick the encoding with --cfg-options model.backbone.encoding=NAME.
_base_ = ['./vit_tiny_shapes2d_position.py']

model = dict(backbone=dict(mixed_sizes='pad'))
size_policy = dict(type='RandomAspect', patch_size=4, max_tokens=64, max_ratio=3.0)
train_dataloader = dict(
    collate_fn=dict(type='vispe.mixed_size_collate'),  # stacks a batch of one size, else keeps a list of images
    dataset=dict(size_policy=size_policy),
)
