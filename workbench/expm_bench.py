"""Whether vispe's hand-written matrix exponential (``vispe.encodings.block_rotations.expm``, with its own backward)
earns its lines: forward + backward against ``torch.linalg.matrix_exp`` on the exponentials LieRE and HARoPE take at
ViT-S/16 224, side by side in one process, median of several runs.

    python workbench/expm_bench.py [--threads 1] [--repeats 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

import vispe
from vispe.encodings import block_rotations
from vispe.positions import grid_positions


def median_ms(fn: Callable[[torch.Tensor], torch.Tensor], a: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        x = a.detach().requires_grad_()
        start = time.perf_counter()
        fn(x).square().sum().backward()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def cases() -> dict[str, torch.Tensor]:
    """The generators' exponent matrices of one layer: LieRE (b = 8) on a 14 x 14 grid at init, HARoPE's U and V
    with generators moved off their zero init."""
    torch.manual_seed(0)
    liere = vispe.build_encoding('liere', dim=384, num_heads=6, ndim=2, grid_size=(14, 14))
    x = liere.normalized_coords(grid_positions(14, 14)).reshape(1, -1, 2)
    with torch.no_grad():
        a = torch.randn(2 * 6, 64, 64) * 0.05
        return {'liere b=8': liere.angle_matrices(x), 'harope': a - a.transpose(-1, -2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--repeats', type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, {args.threads} thread(s), forward + backward, median of {args.repeats}')
    print(f'{"case":<12} {"shape":<24} {"expm ms":>9} {"matrix_exp ms":>14} {"ratio":>6}')
    for name, a in cases().items():
        ours = median_ms(block_rotations.expm, a, args.repeats)
        torchs = median_ms(torch.linalg.matrix_exp, a, args.repeats)
        print(f'{name:<12} {str(tuple(a.shape)):<24} {ours:>9.1f} {torchs:>14.1f} {torchs / ours:>5.2f}x')


if __name__ == '__main__':
    main()
