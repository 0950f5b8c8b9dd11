"""tools/gpu_check.sh and its Python (workbench/gpu_*.py) on the CPU: every step at toy sizes into one
summary with the expected sections and rows, the order compiled rows are spent in, what the budget leaves out
(named in the summary), and the shell wrapper's choice of Python. Nothing here times anything."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workbench.gpu_steps import Clock, StepResult, compile_order, compiled_benchmark, plan_for, run_gpu_check
from workbench.gpu_summary import summary_markdown

ROOT = Path(__file__).resolve().parents[1]
STEPS = [
    'tests', 'eager_small', 'eager_large', 'attention_small', 'mixed', 'video', 'throughput', 'attention_large',
    'attention_huge', 'attention_huge_flex', 'compiled_small', 'compiled_large', 'attention_small_flex',
    'attention_large_flex',
]  # fmt: skip
SECTIONS = [
    '## Targets', '## Model level', '## vispe against timm', '## Attention cores', '## FlexAttention', '## Mixed-size',
    '## Video', '## Steps',
]  # fmt: skip
#: what the toy run on a CPU cannot do: FlexAttention has no CPU backward
CPU_SKIPS = {'attention_huge_flex', 'attention_small_flex', 'attention_large_flex'}


def toy_plan():
    """The toy CPU plan, one encoding row, compiled with aot_eager (dynamo and AOT autograd, no code generation:
    the steps, quickly), the GPU tests from tests/test_gpu.py alone (they skip here), one throughput round."""
    plan = plan_for('cpu', ['rope_axial'], compile_backend='aot_eager')
    return replace(plan, tests=('tests/test_gpu.py',), throughput_rounds=1)


def rows_of(summary: str, section: str) -> dict[str, list[str]]:
    """The table rows under ``section``, by their first cell."""
    lines = summary.split(section, 1)[1].split('\n## ', 1)[0].splitlines()
    cells = [[c.strip() for c in line.strip('|').split('|')] for line in lines if line.startswith('| ')]
    return {row[0]: row[1:] for row in cells[1:]}  # without the header


#: one xdist worker runs this module (make test's --dist loadgroup), so its module fixture runs once
#: (every step of the check at toy sizes)
pytestmark = pytest.mark.xdist_group('gpu_check')


@pytest.fixture(scope='module')
def toy_run(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp('gpu_check')
    plan = toy_plan()
    clock = Clock(1800.0)
    old = os.getcwd()
    os.chdir(ROOT)  # pytest finds tests/test_gpu.py, and the throughput config, from the checkout
    try:
        results = run_gpu_check(plan, out, 1800.0, clock)
    finally:
        os.chdir(old)
    return plan, out, results, summary_markdown(plan, results, 1800.0, clock.used())


def test_every_step_runs_at_toy_sizes_and_writes_its_report(toy_run) -> None:
    _, out, results, _ = toy_run
    expected = [(key, 'skipped' if key in CPU_SKIPS else 'done') for key in STEPS]
    assert [(r.key, r.status) for r in results] == expected, [r.note for r in results]
    assert results[STEPS.index('attention_huge_flex')].note == 'FlexAttention has no backward on CPU'
    for key in (k for k in STEPS if k not in CPU_SKIPS):
        assert json.loads((out / f'{key}.json').read_text())
    compiled = json.loads((out / 'compiled_small.json').read_text())
    assert compiled['compile'] is True and compiled['amp'] is True and compiled['compile_backend'] == 'aot_eager'
    assert compiled['compile_scope'] == 'blocks'  # each block compiled: one graph every block reuses
    assert [r['encoding'] for r in compiled['results']] == compile_order(toy_plan(), toy_plan().small)
    assert 'skipped' in (out / 'tests.txt').read_text()  # no CUDA here: the GPU tests skip, and say so


def test_the_summary_has_every_section_and_row(toy_run) -> None:
    plan, _, _, summary = toy_run
    assert summary.startswith('# GPU check: CPU') and 'torch ' + torch.__version__ in summary
    positions = [summary.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    targets = rows_of(summary, '## Targets')
    for mode in ('eager', 'compiled'):
        ratio, target, verdict = targets[f'rope_axial / ape_learned, {mode}']
        assert float(ratio) > 0 and target == '<= 1.05' and verdict.startswith('not judged')  # toy sizes
    for timm_row, vispe_row, _ in plan.pairs:
        assert float(targets[f'{vispe_row} / {timm_row}, compiled'][0]) > 0
    assert {'rope_mixed padded / fixed', 'rope_mixed packed / fixed', 'plain loop / Runner images/s'} <= set(targets)
    model = rows_of(summary, '## Model level')
    assert list(model) == ['ape_learned', 'rope_axial'] and model['ape_learned'][1:5] == ['1.000'] * 4
    assert all(float(x) > 0 for x in model['rope_axial'][1:5])  # eager and compiled, both settings
    assert len(rows_of(summary, '## vispe against timm')) == len(plan.pairs)
    attention = rows_of(summary, '## Attention cores')
    assert list(attention) == ['sdpa', 'sdpa_bias', 'rope_axial']
    assert attention['sdpa'][1] == '1.000' and attention['sdpa_bias'][2] == '1.000'  # each floor against itself
    assert list(rows_of(summary, '## Steps')) == STEPS
    video = rows_of(summary, '## Video')
    assert list(video) == ['ape_learned', 'rope_axial'] and video['ape_learned'][:2] == ['embed', '1.000']
    assert video['rope_axial'][0] == 'rotary' and float(video['rope_axial'][1]) > 0
    flex = rows_of(summary, '## FlexAttention')
    assert list(flex) == [f'alibi2d, {s.label}' for s in (plan.small, plan.large, plan.huge)]
    huge = flex[f'alibi2d, {plan.huge.label}']
    assert float(huge[0]) > 0 and huge[1:3] == ['-', '-'] and float(huge[5]) > 0  # no FlexAttention figure on CPU
    assert flex[f'alibi2d, {plan.small.label}'][0] == '-'  # the toy plan's encodings hold no bias row there


def test_compiled_rows_go_baseline_targets_then_the_rest_with_each_timm_pair_after_its_encoding() -> None:
    plan = plan_for('cuda', ['peg', 'harope', 'rope_mixed', 'rope_axial', 'ape_learned', 'rope_dinov3'])
    assert compile_order(plan, plan.small) == [
        'ape_learned', 'timm:vit_small_patch16_224', 'rope_axial', 'rope_mixed',
        'timm:vit_small_patch16_rope_mixed_224', 'vispe:vit_small_patch16_rope_mixed_224', 'rope_dinov3',
        'timm:vit_small_patch16_dinov3', 'vispe:vit_small_patch16_dinov3', 'harope', 'peg',
    ]  # fmt: skip
    assert compile_order(plan, plan.large) == [
        'ape_learned',
        'rope_axial',
        'rope_mixed',
        'rope_dinov3',
        'harope',
        'peg',
    ]
    assert plan.small.batch_size == 64 and plan.large.model == 'vit_base_patch16_224' and plan.large.img_size == 448


def test_what_would_overrun_the_budget_is_left_out_and_named() -> None:
    plan = replace(toy_plan(), compile_s=600.0, estimates={'mixed': 600.0})
    clock = Clock(60.0)
    report, note = compiled_benchmark(plan, plan.small, clock)
    assert report is None and note == f'rows left out for lack of time: {", ".join(compile_order(plan, plan.small))}'
    results = [StepResult('compiled_small', 'compiled, toy', 'skipped', 0.0, None, note)]
    summary = summary_markdown(plan, results, 60.0, 1.0)
    targets = rows_of(summary, '## Targets')
    assert targets['rope_axial / ape_learned, compiled'][2] == 'not measured (skipped: see the steps)'
    assert rows_of(summary, '## Steps')['compiled_small'][-1] == note
    assert rows_of(summary, '## Model level')['rope_axial'][2] == '-'


def test_steps_expected_to_overrun_the_budget_are_skipped_with_the_reason(tmp_path: Path) -> None:
    plan = replace(toy_plan(), estimates=dict.fromkeys(STEPS[:10], 1e6), compile_s=1e6)
    results = run_gpu_check(plan, tmp_path, 30.0, Clock(30.0, time.monotonic()))
    assert [r.key for r in results] == STEPS and {r.status for r in results} == {'skipped'}
    assert results[0].note.startswith('needs about 1000000 s')
    assert 'lack of time' in results[STEPS.index('compiled_large')].note


def load_tool():
    spec = importlib.util.spec_from_file_location('gpu_check_tool', ROOT / 'tools' / 'gpu_check.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason='with a GPU, --device cuda would run the whole check')
def test_cuda_without_a_gpu_is_one_line_and_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert load_tool().main(['--device', 'cuda', '--out', 'unused']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'no CUDA device' in err and '--device cpu' in err


@pytest.mark.parametrize('venv', [True, False], ids=['venv', 'python3'])
def test_the_script_runs_the_venvs_python_else_python3(tmp_path: Path, venv: bool) -> None:
    """A checkout with .venv uses it; one without (the GPU machine) uses python3; both get the arguments."""
    (tmp_path / 'tools').mkdir()
    shutil.copy(ROOT / 'tools' / 'gpu_check.sh', tmp_path / 'tools')
    fake = '#!/bin/sh\necho "$0 HF_HUB_OFFLINE=$HF_HUB_OFFLINE $*"\n'
    bin_dir = tmp_path / ('.venv/bin' if venv else 'bin')
    bin_dir.mkdir(parents=True)
    (bin_dir / ('python' if venv else 'python3')).write_text(fake)
    (bin_dir / ('python' if venv else 'python3')).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != 'PY'}
    env['PATH'] = f'{tmp_path / "bin"}:{env["PATH"]}'
    proc = subprocess.run(
        ['bash', str(tmp_path / 'tools' / 'gpu_check.sh'), '--device', 'cpu'], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    python, *rest = proc.stdout.split()
    assert Path(python).resolve() == (tmp_path / ('.venv/bin/python' if venv else 'bin/python3')).resolve()
    assert rest == ['HF_HUB_OFFLINE=1', 'tools/gpu_check.py', '--device', 'cpu']


def test_without_pytest_the_tests_step_fails_in_one_line_and_the_rest_go_on(monkeypatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'pytest' else real(name, *a))
    plan = replace(toy_plan(), estimates=dict.fromkeys(STEPS[1:10], 1e6), compile_s=1e6)
    results = run_gpu_check(plan, tmp_path, 30.0, Clock(30.0, time.monotonic()))
    assert results[0].status == 'failed' and results[0].note.startswith('RuntimeError: pytest is not installed')
    assert [r.status for r in results[1:]] == ['skipped'] * 13  # the budget's verdicts, not the failure's
    assert 'GPU-marked tests: failed RuntimeError: pytest is not installed' in summary_markdown(plan, results, 30, 1)


def test_irpe_on_flex_is_judged_against_the_learned_bias_floor_in_time_and_memory() -> None:
    """The issue-37 target rows: irpe's FlexAttention core over the sdpa_bias floor, time (<= 1.3) and peak memory
    (<= 1.0), judged on a GPU plan from the two attention reports of the huge setting."""
    from workbench.gpu_summary import Summary

    def report(rows: dict[str, tuple[float, float]]) -> dict:
        return {'results': [{'encoding': n, 'median_ms': ms, 'peak_mb': mb} for n, (ms, mb) in rows.items()]}

    plan = plan_for('cuda', ['irpe'])
    results = [
        StepResult('attention_huge', 'sdpa', 'done', 1.0, report({'irpe': (17.5, 2680.0), 'sdpa_bias': (7.8, 1600.0)})),
        StepResult('attention_huge_flex', 'flex', 'done', 1.0, report({'irpe': (14.0, 1570.0)})),
    ]
    rows = {row[0]: row[1:] for row in Summary(plan, results).flex_targets()}
    time_row, memory_row = (rows[f'irpe on FlexAttention / sdpa_bias, {what}, attention core ViT-B/16 1024 px b2']
                            for what in ('time', 'peak memory'))  # fmt: skip
    assert time_row == ['1.795', '<= 1.30', 'NOT met'] and memory_row == ['0.981', '<= 1.00', 'met']
    section = rows_of('\n'.join(Summary(plan, results).flex()), '## FlexAttention')
    assert section['irpe, ViT-B/16 1024 px b2'] == ['2.244', '1.795', '0.800', '2680', '1570', '1600']
