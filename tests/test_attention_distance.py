"""Attention distance (vispe.evaluation.attention_distance): computed from the model's own attention weights (equal
to a direct computation on one batch, and those weights rebuild each layer's output), within its bounds, on the grid
of each size, and the grid's mean pairwise distance for uniform attention."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from vispe.engine.config import load_config
from vispe.evaluation.attention_distance import (
    attention_distances,
    grid_diameter,
    image_distances,
    plot_attention_distances,
    recorded_distances,
    sample_batch,
    uniform_distance,
)
from vispe.evaluation.trained_model import load_model
from vispe.registry import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, 'configs/vit/vit_tiny_shapes2d_position.py')
PATCH = 4  # the tiny config's patch, in pixels
IMAGES = 4


def tiny_checkpoint(tmp_path, encoding: str, uniform: bool = False):
    """(config, checkpoint) of a 2-block, width-32, 2-head ViT on 32 px shapes2d, built and saved: iRPE's tables drawn
    at random so its bias shapes the weights; ``uniform``: q and k weights zeroed, so attention is uniform."""
    path = tmp_path / f'{encoding}.py'
    path.write_text(f"""
_base_ = ['{BASE}']
model = dict(backbone=dict(depth=2, embed_dim=32, num_heads=2, encoding='{encoding}'))
val_dataloader = dict(batch_size=8, dataset=dict(num_samples=8))
test_dataloader = val_dataloader
""")
    cfg = load_config(str(path))
    from mmengine.registry import init_default_scope

    init_default_scope('vispe')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if 'tables' in name:
                param.normal_(0.0, 1.0)
            if uniform and name.endswith('qkv.weight') or uniform and name.endswith('qkv.bias'):
                param[: 2 * param.shape[0] // 3] = 0.0  # q and k rows: every logit 0
    ckpt = tmp_path / f'{encoding}.pth'
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, str(ckpt))
    return cfg, str(ckpt)


@pytest.fixture(scope='module', params=['rope_mixed', 'irpe'])
def tiny(request, tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def by_hand(attn, x, pos) -> torch.Tensor:
    """Softmax weights from the block's qkv weights, the encoding's rotation or logit bias, and a plain softmax."""
    B, N, C = x.shape
    H = attn.num_heads
    q, k, _ = F.linear(x, attn.qkv.weight, attn.qkv.bias).reshape(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
    logits_bias = 0.0
    for name, enc in attn.pe.items():
        if name == 'rope_mixed':
            q, k = enc.rotate(q, k, pos)
        elif name == 'irpe':
            logits_bias = enc.logit_bias(q, k, pos)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // H) + logits_bias, dim=-1)


def distances_by_hand(weights: torch.Tensor, side: int) -> torch.Tensor:
    """Per head: the mean over images and patch queries of sum_j a_ij |p_i - p_j| (px), a renormalised on patches."""
    centres = torch.tensor([[r * PATCH, c * PATCH] for r in range(side) for c in range(side)], dtype=torch.float64)
    pairwise = (centres[:, None] - centres[None]).norm(dim=-1)
    a = weights[:, :, 1:, 1:].double()  # one cls token
    a = a / a.sum(-1, keepdim=True)
    return torch.einsum('bhij,ij->bhi', a, pairwise).mean(dim=(0, 2))


def test_distances_equal_a_direct_computation_on_one_batch(tiny):
    cfg, ckpt = tiny
    result = attention_distances(cfg, ckpt, [32], num_images=IMAGES)
    model, _ = load_model(cfg, ckpt, 'cpu')
    inputs, outputs = {}, {}
    layers = [m.attn for m in model.backbone.blocks]

    def keep(i: int):
        def hook(module, args, out) -> None:
            inputs[i], outputs[i] = args, out

        return hook

    for i, attn in enumerate(layers):
        attn.register_forward_hook(keep(i))
    with torch.no_grad():
        model.test_step(sample_batch(cfg, 32, IMAGES))
    entry = result['sizes']['32']
    assert entry['grid'] == [8, 8] and entry['images'] == IMAGES and len(entry['distances']) == len(layers) == 2
    for i, attn in enumerate(layers):
        x, pos = inputs[i][:2]
        with torch.no_grad():
            weights = by_hand(attn, x, pos)
            # these weights are the ones the layer used: they rebuild its output (SDPA with the bias as a mask)
            v = attn.qkv(x).reshape(*x.shape[:2], 3, attn.num_heads, -1)[:, :, 2].transpose(1, 2)
            rebuilt = attn.proj((weights @ v).transpose(1, 2).reshape(x.shape))
        torch.testing.assert_close(rebuilt, outputs[i], rtol=1e-4, atol=1e-5)
        expected = distances_by_hand(weights, 8)
        recorded = torch.tensor(entry['distances'][i], dtype=torch.float64)
        torch.testing.assert_close(recorded, expected, rtol=1e-5, atol=0)
        share = weights[:, :, 1:, 0].double().mean(dim=(0, 2))
        torch.testing.assert_close(torch.tensor(entry['prefix_attention'][i], dtype=torch.float64), share)


def test_recording_leaves_the_outputs_unchanged(tiny):
    cfg, ckpt = tiny
    model, _ = load_model(cfg, ckpt, 'cpu')
    batch = sample_batch(cfg, 32, IMAGES)
    with torch.no_grad():
        plain = model.test_step(batch)
        with recorded_distances(model, (PATCH, PATCH)) as records:
            recorded = model.test_step(batch)
        after = model.test_step(batch)
    assert all(len(parts) == 1 for parts in records.values()) and len(records) == 2
    assert len(records['backbone.blocks.0.attn']) == 1  # the hooks are gone after the block
    for a, b, c in zip(plain, recorded, after):
        assert torch.equal(a['score'], b['score']) and torch.equal(a['score'], c['score'])


def test_distances_lie_within_the_grid_and_grow_with_it(tiny):
    cfg, ckpt = tiny
    result = attention_distances(cfg, ckpt, [32, 64], num_images=IMAGES)
    small, large = result['sizes']['32'], result['sizes']['64']
    assert small['grid'] == [8, 8] and large['grid'] == [16, 16] and result['patch_size'] == [PATCH, PATCH]
    assert large['max_distance'] == pytest.approx(15 * PATCH * math.sqrt(2))  # the 16x16 grid's, not the 8x8's
    assert small['max_distance'] == pytest.approx(7 * PATCH * math.sqrt(2))
    for entry in (small, large):
        flat = [d for layer in entry['distances'] for d in layer]
        assert len(flat) == 4 and all(0 <= d <= entry['max_distance'] for d in flat)
        assert all(0 < s < 1 for layer in entry['prefix_attention'] for s in layer)
    # random weights attend nearly evenly: about the uniform distance, which nearly doubles with the grid
    assert large['uniform_distance'] / small['uniform_distance'] == pytest.approx(2.0, abs=0.02)
    for entry in (small, large):
        assert all(abs(d / entry['uniform_distance'] - 1) < 0.2 for layer in entry['distances'] for d in layer)


def test_uniform_attention_gives_the_mean_pairwise_distance(tmp_path):
    cfg, ckpt = tiny_checkpoint(tmp_path, 'rope_mixed', uniform=True)
    result = attention_distances(cfg, ckpt, [32, 64], num_images=2)
    for label, side in (('32', 8), ('64', 16)):
        entry = result['sizes'][label]
        centres = torch.tensor([[r, c] for r in range(side) for c in range(side)], dtype=torch.float64) * PATCH
        mean_pairwise = float((centres[:, None] - centres[None]).norm(dim=-1).mean())
        assert entry['uniform_distance'] == pytest.approx(mean_pairwise, rel=1e-12)
        for layer, shares in zip(entry['distances'], entry['prefix_attention']):
            assert layer == pytest.approx([mean_pairwise] * 2, rel=1e-5)
            assert shares == pytest.approx([1 / (side * side + 1)] * 2, rel=1e-5)  # the cls key: 1 / N of the weight


def test_grid_measures_in_closed_form():
    # a 2x2 grid of 4 px patches: from each centre 0, 4, 4 and 4 sqrt(2) px
    assert uniform_distance((2, 2), (4, 4)) == pytest.approx((8 + 4 * math.sqrt(2)) / 4)
    assert grid_diameter((2, 3), (4, 5)) == pytest.approx(math.hypot(4, 10))
    weights = torch.zeros(1, 1, 5, 5)
    weights[0, 0, :, 4] = 0.5  # every query: half on patch (1, 1), half on the prefix token
    weights[0, 0, :, 0] = 0.5
    distance, share = image_distances(weights, (2, 2), (4, 4), num_prefix=1)
    # queries (0,0), (0,1), (1,0), (1,1) are 4 sqrt(2), 4, 4, 0 px from (1,1)
    assert distance.item() == pytest.approx((8 + 4 * math.sqrt(2)) / 4) and share.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match='do not fit 1 prefix tokens and a 3x3 grid'):
        image_distances(weights, (3, 3), (4, 4), num_prefix=1)


def test_bad_arguments_are_refused(tiny):
    cfg, ckpt = tiny
    with pytest.raises(ValueError, match='not divisible by the model.s patch 4x4'):
        attention_distances(cfg, ckpt, [30])
    with pytest.raises(ValueError, match='num_images must be at least 1'):
        attention_distances(cfg, ckpt, [32], num_images=0)


def test_plot_writes_one_png_and_refuses_an_empty_result(tiny, tmp_path):
    cfg, ckpt = tiny
    result = attention_distances(cfg, ckpt, [32, 64], num_images=2)
    path = plot_attention_distances(result, str(tmp_path / 'distance.png'))
    assert open(path, 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
    with pytest.raises(ValueError, match='no image size to plot'):
        plot_attention_distances(dict(result, sizes={}), str(tmp_path / 'empty.png'))
