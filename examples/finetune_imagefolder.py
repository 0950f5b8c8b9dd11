"""Plug a vispe encoding into a timm ViT and fine-tune it on your own images (an ImageFolder tree).

    .venv/bin/python examples/finetune_imagefolder.py DATA_ROOT [--encoding rope_mixed] [--epochs 5] [--out model.pth]

DATA_ROOT holds one folder per class under train/ and val/ (DATA_ROOT/train/cat/*.jpg, DATA_ROOT/val/cat/*.jpg, ...),
images of any size. This is plain PyTorch: vispe converts the model, the loop is yours. For config-driven training
(checkpoints, resume, logging) see docs/guide/training.md.
"""

import argparse

import timm
import torch
from timm.optim import create_optimizer_v2
from torch.utils.data import DataLoader

import vispe  # importing vispe also registers its timm names (vit_tiny_patch16_rope_mixed_224, ...)
from vispe.datasets import ImageFolderDataset


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('data_root', help='ImageFolder tree with train/ and val/ sub-folders')
    parser.add_argument('--model', default='vit_tiny_patch16_224', help='any timm ViT name')
    parser.add_argument('--pretrained', action='store_true', help="start from timm's weights (downloads them)")
    parser.add_argument('--encoding', default='rope_mixed', help='a vispe encoding: vispe.list_encodings() names them')
    parser.add_argument('--image-size', type=int, default=64)
    parser.add_argument('--patch-size', type=int, default=8)
    parser.add_argument('--depth', type=int, default=None, help='fewer blocks than the model has (a quick try)')
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--lr', type=float, default=5e-4)
    parser.add_argument('--out', default='finetuned.pth', help='where the fine-tuned weights go')
    args = parser.parse_args(argv)

    # 1. The data: vispe's ImageFolder reads any image size; training images get timm's augmentation.
    train_set = ImageFolderDataset(args.data_root, split='train', image_size=args.image_size)
    val_set = ImageFolderDataset(args.data_root, split='val', image_size=args.image_size, classes=train_set.classes)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size)

    # 2. The model: a timm ViT, then vispe swaps its learned position table for the encoding (weights kept).
    sizes = dict(num_classes=len(train_set.classes), img_size=args.image_size, patch_size=args.patch_size)
    if args.depth is not None:
        sizes['depth'] = args.depth
    model = timm.create_model(args.model, pretrained=args.pretrained, **sizes)
    vispe.apply_encoding(model, args.encoding)  # in place; the model is still a timm VisionTransformer

    # 3. timm's optimizer factory keeps the encoding's own parameters (e.g. rope_mixed's frequencies) out of decay.
    optimizer = create_optimizer_v2(model, 'adamw', lr=args.lr, weight_decay=0.05)

    losses, accuracies = [], []
    for epoch in range(args.epochs):
        model.train()
        total, count = 0.0, 0
        for batch in train_loader:  # each batch: {'inputs': (B, 3, H, W), 'labels': (B,)}
            loss = torch.nn.functional.cross_entropy(model(batch['inputs']), batch['labels'])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(batch['labels']), count + len(batch['labels'])
        model.eval()
        with torch.no_grad():
            right = sum((model(b['inputs']).argmax(1) == b['labels']).sum().item() for b in val_loader)
        losses.append(total / count)
        accuracies.append(100.0 * right / len(val_set))
        print(f'epoch {epoch + 1}/{args.epochs}: train loss {losses[-1]:.3f}, val accuracy {accuracies[-1]:.1f}%')

    torch.save(model.state_dict(), args.out)
    call = ', '.join([repr(args.model), f'encoding={args.encoding!r}', *(f'{k}={v!r}' for k, v in sizes.items())])
    print(f'saved {args.out}; to use it: vispe.create_model({call}, checkpoint_path={args.out!r})')
    return {'losses': losses, 'accuracies': accuracies, 'classes': train_set.classes, 'model_args': sizes}


if __name__ == '__main__':
    main()
