"""Images of different sizes in one batch: one forward pass, each image on its own token grid.

    .venv/bin/python examples/mixed_sizes.py [--encoding rope_mixed] [--mixed-sizes pack]

A vispe ViT takes a list of (3, H, W) images as well as a (B, 3, H, W) batch, for every 2D encoding; each image's
output equals what it gives alone. The second part trains on such batches, from a data set that serves each image at
its own size. More: docs/guide/mixed-sizes.md.
"""

import argparse

import torch
from torch.utils.data import DataLoader

import vispe
from vispe.datasets import Shapes2D, SquareSizes, mixed_size_collate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--encoding', default='rope_mixed', help='any 2D encoding: vispe.list_encodings(ndim=2)')
    parser.add_argument('--mixed-sizes', default='pack', choices=['pad', 'pack'], help='pad: one image a row; pack: '
                        'several small images share a row')  # fmt: skip
    parser.add_argument('--depth', type=int, default=4)
    parser.add_argument('--steps', type=int, default=3, help='training steps on mixed-size batches')
    args = parser.parse_args(argv)

    model = vispe.create_model(
        'vit_tiny_patch16_224', encoding=args.encoding, mixed_sizes=args.mixed_sizes,
        img_size=32, patch_size=8, depth=args.depth, num_classes=27,
    )  # fmt: skip
    model.eval()

    # 1. Three sizes and aspect ratios in one list (each side a multiple of the 8 px patch).
    images = [torch.randn(3, 32, 32), torch.randn(3, 16, 48), torch.randn(3, 40, 24)]
    with torch.no_grad():
        together = model(images)  # (3, 27): one row of logits per image
        alone = torch.cat([model(image[None]) for image in images])  # each image as a batch of one
        tokens = model.forward_features(images)  # a list: (prefix + h * w, 192) tokens per image
    gap = (together - alone).abs().max().item()
    print(f'logits {tuple(together.shape)}; largest difference from one image at a time: {gap:.1e}')
    print('tokens per image:', [tuple(t.shape) for t in tokens])

    # 2. Training: Shapes2D draws a square side of 16 to 48 px per image; mixed_size_collate keeps a batch of
    # different sizes as a list (and stacks one of a single size), which the model takes as it is.
    data = Shapes2D('position', num_samples=64, size_policy=SquareSizes(16, 48, patch_size=8))
    loader = DataLoader(data, batch_size=8, shuffle=True, collate_fn=mixed_size_collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for step, batch in zip(range(args.steps), loader):
        sizes = sorted({tuple(image.shape[1:]) for image in batch['inputs']})
        loss = torch.nn.functional.cross_entropy(model(batch['inputs']), batch['labels'])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        print(f'step {step + 1}: loss {loss.item():.3f} on a batch of {len(sizes)} sizes {sizes}')
    return {'together': together, 'alone': alone, 'tokens': tokens, 'images': images, 'losses': losses}


if __name__ == '__main__':
    main()
