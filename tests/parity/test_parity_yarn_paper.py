"""``yarn_paper``: YaRN's ramp as the paper's equation writes it (Peng et al. 2023: gamma(r) = 0 below alpha = 1
rotation, 1 above beta = 32, (r - alpha) / (beta - alpha) between), which has no code of its own: computed here
densely in float64 on the settings of transformers' recorded tables, against ``rope_axial``'s frequencies."""

from __future__ import annotations

import math

import pytest
import torch
from recorded import recorded

from vispe.encodings.rope import RoPEAxial

METHODS = ('strategy:yarn_paper',)
TABLES = recorded('yarn_temperature')['tables']


def frequencies(table: dict, strategy: str) -> torch.Tensor:
    enc = RoPEAxial(4 * table['pairs'], 1, theta=table['theta'], grid_size=(table['train'], table['train']))
    enc.strategy = strategy
    return enc.axis_frequencies((table['factor'], table['factor']))[0].double()


def paper(table: dict) -> torch.Tensor:
    """The paper's blend of each pair's interpolated (w / s) and kept frequency, in float64."""
    pairs, theta, train, s = table['pairs'], table['theta'], table['train'], table['factor']
    w = torch.tensor([theta ** (-k / pairs) for k in range(pairs)], dtype=torch.float64)
    r = train * w / (2 * math.pi)
    gamma = ((r - 1.0) / (32.0 - 1.0)).clamp(0.0, 1.0)
    return (1 - gamma) * w / s + gamma * w


@pytest.mark.parametrize('table', TABLES, ids=lambda t: f'{t["pairs"]}pairs-train{t["train"]}-x{t["factor"]}')
def test_yarn_paper_is_the_papers_ramp(table: dict) -> None:
    torch.testing.assert_close(frequencies(table, 'yarn_paper'), paper(table), rtol=1e-6, atol=0)


def test_the_paper_and_the_code_part_on_a_vit_grid_and_agree_on_an_llms() -> None:
    """On a ViT's 14 positions the fastest pair turns 2.2 times: the paper interpolates it almost fully, the code
    keeps it. On 256 positions (pairs at 41 down to 0.7 rotations) the two ramps run between the same pairs."""
    vit = next(t for t in TABLES if t['train'] == 14)
    assert frequencies(vit, 'yarn')[0] == frequencies(vit, 'none')[0]
    assert frequencies(vit, 'yarn_paper')[0] < 0.55 * frequencies(vit, 'yarn')[0]
    llm = next(t for t in TABLES if t['train'] == 256)
    both = frequencies(llm, 'yarn'), frequencies(llm, 'yarn_paper')
    assert torch.equal(both[0][[0, -1]], both[1][[0, -1]])  # the ends: kept and interpolated alike
