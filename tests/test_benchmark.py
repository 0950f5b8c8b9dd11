"""Tests for vispe.evaluation.benchmark and tools/benchmark.py, on a 2-block vit_tiny at 32x32 (4x4 tokens)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import vispe
from vispe.evaluation.benchmark import (
    SDPA,
    BenchmarkConfig,
    Subject,
    build_subjects,
    default_out_path,
    interleaved_times,
    parse_encoding_spec,
    peak_memory_mb,
    resolve_encodings,
    run_benchmark,
    write_report,
)

TINY = dict(
    model='vit_tiny_patch16_224',
    img_size=(32, 32),
    batch_size=2,
    warmup=1,
    repeats=3,
    model_kwargs=dict(patch_size=8, depth=2),
)
REPORT_KEYS = {
    'model',
    'img_size',
    'batch_size',
    'level',
    'device',
    'threads',
    'torch',
    'repeats',
    'baseline',
    'results',
    'memory_method',
}
RESULT_KEYS = {'encoding', 'median_ms', 'min_ms', 'ratio', 'peak_mb'}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    """One intra-op thread: on a small machine shared with other jobs, two threads can wait ~100x longer."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope='module')
def model_report() -> dict:
    return run_benchmark(BenchmarkConfig(**TINY))  # encodings=None: every image (2D) encoding


def check_results(report: dict, names: list) -> None:
    """Shared structural checks: rows in order, baseline ratio exactly 1, ratios consistent, times positive."""
    results = report['results']
    assert [r['encoding'] for r in results] == names
    by_name = {r['encoding']: r for r in results}
    assert by_name[report['baseline']]['ratio'] == 1.0
    base = by_name[report['baseline']]['median_ms']
    for r in results:
        assert RESULT_KEYS <= set(r)
        assert len(r['times_ms']) == report['repeats']
        assert r['median_ms'] >= r['min_ms'] > 0
        assert r['ratio'] == pytest.approx(r['median_ms'] / base)
        assert r['peak_mb'] > 0


def test_model_level_report(model_report: dict, tmp_path: Path) -> None:
    others = [n for n in vispe.list_encodings(ndim=2) if n != 'ape_learned']
    check_results(model_report, ['ape_learned', *others])
    assert model_report['level'] == 'model' and model_report['img_size'] == [32, 32]
    path = write_report(model_report, tmp_path / 'nested' / 'report.json')
    loaded = json.loads(path.read_text())
    assert REPORT_KEYS <= set(loaded)
    assert loaded == model_report


def test_attention_level_has_sdpa_row() -> None:
    report = run_benchmark(BenchmarkConfig(**TINY, level='attention', encodings=['rope_mixed']))
    check_results(report, ['ape_learned', 'rope_mixed', SDPA])


def test_attention_subjects_hold_the_models_encodings() -> None:
    subjects = {s.name: s for s in build_subjects(BenchmarkConfig(**TINY, level='attention', encodings=['rope_axial']))}
    assert list(subjects['rope_axial'].module.attn.pe) == ['rope_axial']
    assert list(subjects['ape_learned'].module.pe) == ['ape_learned']  # model-level: its embed hook runs
    assert not subjects[SDPA].module.attn.pe and not subjects[SDPA].module.pe
    layer = subjects['rope_axial'].module
    assert layer.attn.qkv.in_features == 192 and layer.attn.num_heads == 3  # vit_tiny's width and heads
    subjects['rope_axial'].step()
    assert all(p.grad is not None for p in layer.parameters())


def test_unknown_encoding_names_the_closest() -> None:
    with pytest.raises(ValueError, match="'rope_axial'"):
        build_subjects(BenchmarkConfig(**TINY, encodings=['rope_axail']))


def test_baseline_first_and_once() -> None:
    names = resolve_encodings(['rope_axial', 'ape_learned', 'rope_axial'], 'ape_learned')
    assert names == ['ape_learned', 'rope_axial']
    assert resolve_encodings(['rope_axial'], SDPA, level='attention') == [SDPA, 'rope_axial']
    with pytest.raises(ValueError):
        resolve_encodings(['rope_axial'], SDPA, level='model')


def test_parse_encoding_spec() -> None:
    assert parse_encoding_spec('rope_axial') == ['rope_axial']
    assert parse_encoding_spec('irpe:mode=bias') == [{'type': 'irpe', 'mode': 'bias'}]
    assert parse_encoding_spec('irpe:mode=contextual,on=qkv+ape_learned') == [
        {'type': 'irpe', 'mode': 'contextual', 'on': 'qkv'},
        'ape_learned',
    ]
    parsed = parse_encoding_spec('x:a=3,b=0.5,c=true,d=False,e=none,f=1e-3,g=k')[0]
    assert parsed == {'type': 'x', 'a': 3, 'b': 0.5, 'c': True, 'd': False, 'e': None, 'f': 1e-3, 'g': 'k'}
    assert type(parsed['a']) is int and type(parsed['b']) is float
    with pytest.raises(ValueError, match='key=value'):
        parse_encoding_spec('irpe:mode')


def test_parameterised_rows_keep_their_label() -> None:
    specs = ['irpe:mode=bias', 'irpe:on=qkv']
    assert resolve_encodings(specs, 'ape_learned') == ['ape_learned', *specs]
    with pytest.raises(ValueError, match="'irpe'"):
        resolve_encodings(['irp:mode=bias'], 'ape_learned')
    subjects = {s.name: s for s in build_subjects(BenchmarkConfig(**TINY, encodings=specs))}
    assert subjects['irpe:mode=bias'].module.blocks[0].attn.pe['irpe'].mode == 'bias'
    assert subjects['irpe:on=qkv'].module.blocks[0].attn.pe['irpe'].on == 'qkv'


def test_repeats_are_interleaved_and_rotated() -> None:
    calls = []
    subjects = [Subject(n, torch.nn.Identity(), lambda n=n: calls.append(n), lambda: None) for n in 'abc']
    times = interleaved_times(subjects, warmup=1, repeats=2, device='cpu')
    assert calls == list('abc') + list('abc') + list('bca')  # warm-up round, then rounds starting at a, b
    assert {k: len(v) for k, v in times.items()} == {'a': 2, 'b': 2, 'c': 2}


def test_cpu_peak_memory_counts_live_tensors() -> None:
    def step() -> None:
        a = torch.ones(2**20)  # 4 MiB
        b = torch.ones(2**20)  # 4 MiB more: 8 MiB live
        del a, b
        torch.ones(2**20)  # 4 MiB again, while only it is live

    assert peak_memory_mb(step, 'cpu') == pytest.approx(8.0, abs=0.05)


def test_default_out_path() -> None:
    assert default_out_path('vit_small_patch16_224', (224, 224), 'model') == Path(
        'outputs/benchmark/vit_small_patch16_224_224_model.json'
    )
    assert default_out_path('m', (224, 320), 'attention').name == 'm_224x320_attention.json'
    assert default_out_path('DiT-S/2', (32, 32), 'model') == Path('outputs/benchmark/DiT-S-2_32_model.json')


def load_tool():
    spec = importlib.util.spec_from_file_location('benchmark_tool', ROOT / 'tools' / 'benchmark.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_unknown_encoding_is_one_line_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert load_tool().main(['--model', 'vit_tiny_patch16_224', '--encodings', 'rope_axail']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'Traceback' not in err
    assert "did you mean 'rope_axial'" in err


def test_cli_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / 'b.json'
    argv = [
        '--model',
        'vit_tiny_patch16_224',
        '--img-size',
        '32',
        '48',
        '--batch-size',
        '1',
        '--encodings',
        'rope_axial',
        '--warmup',
        '0',
        '--repeats',
        '1',
        '--out',
        str(out),
    ]
    assert load_tool().main(argv) == 0
    report = json.loads(out.read_text())
    assert report['img_size'] == [32, 48]
    assert [r['encoding'] for r in report['results']] == ['ape_learned', 'rope_axial']
    printed = capsys.readouterr().out
    assert 'median ms' in printed and f'wrote {out}' in printed


@pytest.mark.parametrize('level', ['model', 'attention'])
def test_dit_rows_use_ape_sincos_as_baseline(level: str) -> None:
    cfg = BenchmarkConfig(
        model='DiT-Ti/4',
        img_size=(16, 24),
        batch_size=2,
        encodings=['rope_axial', 'harope'],
        level=level,
        warmup=1,
        repeats=2,
        model_kwargs=dict(depth=1, num_classes=4),
    )
    report = run_benchmark(cfg)
    assert report['baseline'] == 'ape_sincos'
    names = ['ape_sincos', 'rope_axial', 'harope'] + ([SDPA] if level == 'attention' else [])
    check_results(report, names)
