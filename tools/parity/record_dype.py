"""Record DyPE's frequency tables (its vision YaRN and NTK, with and without the timestep schedule) into
tests/data/parity/dype.pt, which tests/parity/test_parity_dype.py compares vispe's ``dype_yarn``, ``dype_ntk`` and
``ntk`` strategies with.

The reference is the authors' repository guyyariv/DyPE at commit 436fe612fb7695fa2d5dc32d63390c048ba6033c,
``flux/transformer_flux.py``: ``FluxPosEmbed`` (method 'yarn' or 'ntk', ``dype`` on or off, ``set_timestep``) builds
cos and sin per position axis with ``get_1d_rotary_pos_embed``, whose ``find_correction_range`` gives the two ramps
of its vision YaRN. The module imports diffusers (and sqlalchemy), which it does not use for these functions, but
they are installed so that it imports as it is:

    git --git-dir=<mirror of guyyariv/DyPE> archive 436fe612fb7695fa2d5dc32d63390c048ba6033c | tar -x -C /tmp/ref/DyPE
    pip install --target /tmp/dypeenv --no-deps diffusers==0.35.2 sqlalchemy==2.0.44
    PYTHONPATH=/tmp/ref/DyPE:/tmp/dypeenv:<transformers' folder, see record_mrope.py> python tools/parity/record_dype.py

``FluxPosEmbed`` fixes the training grid at 64 patches (1024 px / 16); it is set to each case's training grid
through its ``base_patches`` attribute. Each case is run on the three position ids (0, 0, 0), (0, 1, 1) and
(0, H - 1, W - 1): the last sets the grid the reference scales for, the second gives cos and sin of each axis'
frequencies times 1, from which the frequencies (the angle) and the temperature (the length) are read in float64.
The reference's ramp ends (``find_correction_range``) are recorded too.
"""

from __future__ import annotations

import os

import torch
from flux import transformer_flux as ref

COMMIT = '436fe612fb7695fa2d5dc32d63390c048ba6033c'
OUT = os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'data', 'parity', 'dype.pt')
#: (theta, rotary dims per axis, training grid per axis, target grid (H, W)): FLUX's own setting, then ViT-sized
#: ones, where the thresholds pass the ladder's ends sooner
CASES = (
    (10000.0, 56, 64, (96, 128)),
    (10000.0, 56, 64, (128, 128)),
    (100.0, 16, 16, (24, 32)),
    (100.0, 16, 16, (32, 32)),
    (100.0, 16, 8, (16, 12)),
)
TIMES = (1.0, 0.5, 0.2, 0.05, 1e-3)


def frequencies(embed: ref.FluxPosEmbed, grid: tuple[int, int]) -> tuple[list[torch.Tensor], list[float]]:
    """Per image axis (rows, columns): the frequencies and the temperature the reference uses on ``grid``."""
    ids = torch.tensor([[0, 0, 0], [0, 1, 1], [0, grid[0] - 1, grid[1] - 1]], dtype=torch.float64)
    cos, sin = embed(ids)
    dims = embed.axes_dim
    freqs, temps = [], []
    for axis in (1, 2):
        start = sum(dims[:axis])
        c, s = cos[1, start : start + dims[axis] : 2].double(), sin[1, start : start + dims[axis] : 2].double()
        freqs.append(torch.atan2(s, c))  # every frequency is under pi: the angle at position 1 is the frequency
        temps.append(float(torch.sqrt(c**2 + s**2).mean()))
    return freqs, temps


def ramp_ends(theta: float, dim: int, train: int, time: float) -> list[list[float]]:
    """The reference's (low, high) of both vision-YaRN ramps at ``time`` (its ``find_correction_range``, then the
    clamp to dim // 2 that ``get_1d_rotary_pos_embed`` adds)."""
    kappa = time**2.0
    ends = []
    for fast, slow in ((1.25, 0.75), (16.0, 2.0)):
        low, high = ref.find_correction_range(fast * kappa, slow * kappa, dim, theta, train)
        ends.append([float(max(0, low)), float(min(dim // 2, high))])
    return ends


def main() -> None:
    cases = []
    for theta, dim, train, grid in CASES:
        for method, dype, times in (('yarn', True, TIMES), ('ntk', True, TIMES), ('ntk', False, (1.0,))):
            for time in times:
                embed = ref.FluxPosEmbed(theta=int(theta), axes_dim=[2, dim, dim], method=method, dype=dype)
                embed.base_patches = train
                embed.set_timestep(time)
                freqs, temps = frequencies(embed, grid)
                cases.append(
                    {
                        'theta': theta,
                        'dim': dim,
                        'train': train,
                        'grid': list(grid),
                        'method': method,
                        'dype': dype,
                        'time': time,
                        'freqs': freqs,
                        'temperature': temps,
                        'ramp_ends': ramp_ends(theta, dim, train, time) if method == 'yarn' else [],
                    }
                )
    record = {
        'reference': f'guyyariv/DyPE@{COMMIT}:flux/transformer_flux.py:FluxPosEmbed,get_1d_rotary_pos_embed',
        'cases': cases,
    }
    torch.save(record, OUT)
    print(f'wrote {len(cases)} cases to {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
