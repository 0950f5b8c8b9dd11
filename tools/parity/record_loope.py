"""Record LOOPE (Chowdhury, Rahman and Taki 2025) into tests/data/parity/loope.pt, which
tests/parity/test_parity_loope.py compares vispe's ``loope`` with.

The reference is the authors' repository AbtahiMajeed144/LOOPE at commit 945704caebaa469f72fd4e0e4b9feca0feb00574,
``models/positional_encodings``:

- ``hilbert.py``: ``gilbert_2d`` (the curve: each cell's 1-based index along it) and ``get_hilbert_pos_embed`` (the
  fixed table: sin and cos of the curve index, interleaved, the cls token at index 0);
- ``art_pe.py``: ``ArtPE``, LOOPE itself: the curve index plus a context bias 2 sigmoid(f(image, coordinates)) - 1
  computed from each image by a small CNN (``art_conv``), through the same sinusoid.

The package is imported as ``positional_encodings`` from ``models/`` (``models/__init__.py`` would import every
model of the repository, transformers included; the encodings need torch and numpy alone). Run:

    git --git-dir=<mirror of AbtahiMajeed144/LOOPE> archive HEAD models | tar -x -C /tmp/ref/LOOPE
    python tools/parity/record_loope.py /tmp/ref/LOOPE

Recorded, in float32 (the reference's dtype): the curve of square grids of side 4, 7, 8, 10, 14, 16, 17 and 20; the
fixed table (width 16) of a 7 x 7 grid (the training grid of the test) and of a 10 x 10 grid (an unseen one, for
``extend``); and ``ArtPE`` (width 16, 64 px images of 16 px patches, a 4 x 4 grid, eval mode, seed 0, its last
linear map drawn from N(0, 25) so that the bias spans (-1, 1)) on two random images: its context bias and its
table per image (the images themselves are not needed and not kept).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'loope.pt')
COMMIT = '945704caebaa469f72fd4e0e4b9feca0feb00574'
SIDES = (4, 7, 8, 10, 14, 16, 17, 20)
DIM, TRAIN, UNSEEN = 16, 7, 10
IMG, PATCH = 64, 16


def main(root: str) -> None:
    sys.path.insert(0, os.path.join(root, 'models'))
    import positional_encodings as pe
    from positional_encodings import art_pe, hilbert

    curves = [torch.from_numpy(hilbert.gilbert_2d(n, n)).to(torch.int16).flatten() for n in SIDES]
    tables = {n: pe.get_hilbert_pos_embed(DIM, n * n + 1).data[0] for n in (TRAIN, UNSEEN)}  # (1 + N, D)
    torch.manual_seed(0)
    side = IMG // PATCH
    art = pe.ArtPE(side * side + 1, DIM, img_size=IMG, patch_size=PATCH).eval()
    with torch.no_grad():  # its last linear map drawn wider than its init, so that the bias spans (-1, 1)
        art.art_conv[-2].weight.normal_(0.0, 5.0)
    images = torch.randn(2, 3, IMG, IMG, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        table = art(images)  # (2, 1 + N, D): the cls row is ArtPE's learned cls entry
        # the context bias as ArtPE's forward forms it from its CNN, before adding the curve index
        grid = art.cord.unsqueeze(0).expand(2, -1, -1, -1)
        context = 2 * art.art_conv(torch.cat([images, grid], dim=1)) - 1  # (2, N)
    source = inspect.getsource(hilbert) + inspect.getsource(art_pe)
    record = {
        'reference': f'AbtahiMajeed144/LOOPE@{COMMIT}:models/positional_encodings/hilbert.py:gilbert_2d, '
        'get_hilbert_pos_embed; art_pe.py:ArtPE',
        'source_sha256': hashlib.sha256(source.encode()).hexdigest(),
        'dim': DIM, 'sides': list(SIDES), 'curves': curves, 'train_side': TRAIN, 'unseen_side': UNSEEN,
        'table_train': tables[TRAIN], 'table_unseen': tables[UNSEEN],
        'art_side': side, 'art_context': context, 'art_table': table[:, 1:].clone(),
    }  # fmt: skip
    torch.save(record, OUT)
    print(f'wrote {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '/tmp/ref/LOOPE')
