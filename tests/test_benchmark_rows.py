"""The benchmark's rows beside the encodings (vispe/bench/rows.py): whole models by timm name, timm's
own or vispe's ('timm:<name>', 'vispe:<name>'), and the learned-bias attention floor ('sdpa_bias'); and bf16 in the
mixed-size benchmark. Structure only: no test times anything."""

from __future__ import annotations

import pytest
import torch
from timm.models import VisionTransformer

from vispe.backbones.vit import VisionTransformerPE
from vispe.bench.measure import BenchmarkConfig, run_benchmark
from vispe.bench.mixed import mixed_subjects
from vispe.bench.rows import SDPA_BIAS
from vispe.bench.subjects import SDPA, build_subjects, encoding_kind

TINY = dict(model='vit_tiny_patch16_224', img_size=(32, 32), batch_size=2, warmup=1, repeats=2)


pytestmark = pytest.mark.usefixtures('one_thread')


def test_model_rows_build_timms_own_model_and_vispes_at_the_benchmarks_size() -> None:
    rows = ['timm:vit_tiny_patch16_224', 'vispe:vit_tiny_patch16_224']
    cfg = BenchmarkConfig(**TINY, encodings=rows, model_kwargs=dict(patch_size=8, depth=2))
    report = run_benchmark(cfg)
    assert [r['encoding'] for r in report['results']] == ['ape_learned', *rows]
    assert all(r['median_ms'] > 0 and r['peak_mb'] > 0 for r in report['results'])
    subjects = {s.name: s.module for s in build_subjects(cfg)}
    timm_model, vispe_model = subjects[rows[0]], subjects[rows[1]]
    assert type(timm_model) is VisionTransformer and isinstance(vispe_model, VisionTransformerPE)
    for model in (timm_model, vispe_model):  # the benchmark's size and model arguments reach both
        assert len(model.blocks) == 2 and model.patch_embed.patch_size == (8, 8)
        assert model.patch_embed.img_size == (32, 32)
    assert list(vispe_model.pe) == ['ape_learned']  # what the ape_learned row of the same model holds
    assert {encoding_kind(r) for r in rows} == {'model'}


@pytest.mark.parametrize('name', ['vit_small_patch16_rope_mixed_224', 'vit_small_patch16_dinov3'])
def test_timms_eva_names_meet_vispes_model_of_the_same_name(name: str) -> None:
    """timm builds its Eva; vispe's row is the VisionTransformerPE of that name, with as many weights."""
    cfg = BenchmarkConfig(**TINY, encodings=[f'timm:{name}', f'vispe:{name}'], model_kwargs=dict(depth=1))
    subjects = {s.name: s for s in build_subjects(cfg)}
    theirs, ours = subjects[f'timm:{name}'].module, subjects[f'vispe:{name}'].module
    assert type(theirs).__name__ == 'Eva' and isinstance(ours, VisionTransformerPE)
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in ours.parameters())
    subjects[f'timm:{name}'].step()  # DINOv3 is headless (num_classes=0): the step still has a loss
    assert all(p.grad is not None for p in theirs.parameters() if p.requires_grad)


def test_bad_model_rows_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match=r"'vit_tiny_patch16_2244' is not a timm model name; did you mean"):
        build_subjects(BenchmarkConfig(**TINY, encodings=['timm:vit_tiny_patch16_2244']))
    with pytest.raises(ValueError, match='runs at --level model'):
        build_subjects(BenchmarkConfig(**TINY, encodings=['vispe:vit_tiny_patch16_224'], level='attention'))
    with pytest.raises(ValueError, match='runs at --level attention'):
        build_subjects(BenchmarkConfig(**TINY, encodings=[SDPA_BIAS]))


def test_sdpa_bias_is_the_plain_layer_with_a_learned_bias_that_gets_its_gradient() -> None:
    cfg = BenchmarkConfig(**TINY, encodings=['rope_axial', SDPA_BIAS], baseline=SDPA, level='attention')
    subjects = {s.name: s for s in build_subjects(cfg)}
    assert list(subjects) == [SDPA, 'rope_axial', SDPA_BIAS]
    layer = subjects[SDPA_BIAS].module
    assert not layer.attn.pe and layer.bias.shape == (1, 3, 5, 5)  # vit_tiny's 3 heads; cls + 2 x 2 patches
    subjects[SDPA_BIAS].step()
    assert layer.bias.grad is not None and layer.bias.grad.abs().sum() > 0
    assert encoding_kind(SDPA_BIAS) == 'bias'


def test_mixed_batches_run_the_forward_in_bf16_with_amp() -> None:
    cfg = BenchmarkConfig(**{**TINY, 'img_size': (16, 16)}, amp=True, model_kwargs=dict(patch_size=4, depth=1))
    subjects, _ = mixed_subjects(cfg, 'rope_mixed')
    dtypes = []
    for s in subjects:
        s.module.blocks[0].attn.qkv.register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
        s.step()
    assert dtypes == [torch.bfloat16] * 4
