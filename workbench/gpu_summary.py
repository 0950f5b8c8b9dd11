"""The GPU check's one summary (OUT/summary.md): what ran where, the targets and whether each is met, then the
figures behind them, then every step's outcome (skipped for lack of time, failed, done).

Sections: the targets (model-level ratios to ape_learned, eager and compiled, at the targets' setting; compiled
vispe against compiled timm; mixed-size batches; the Runner against a plain loop); the model-level ratios of
every encoding at both settings, eager and compiled; vispe against timm; the attention cores against SDPA and
against SDPA with a learned bias; the mixed-size batches; the steps. A figure is judged only in its target's
setting (``targets.TARGET_SETTING``: the toy CPU run shows the targets without judging them); a figure
that was not measured says why.
"""

from __future__ import annotations

import datetime
import platform
import statistics
from collections.abc import Sequence
from typing import Any

import timm
import torch

from vispe.bench.rows import SDPA_BIAS
from vispe.bench.subjects import SDPA, encoding_kind
from workbench.gpu_steps import BASELINE, Plan, StepResult
from workbench.targets import TARGETS, target_of

#: compiled vispe against compiled timm, same architecture and setting (issue 36): no slower
VS_TIMM_TARGET = 1.0
#: iRPE's attention core on FlexAttention at 1024 px (N = 4097) against the learned-bias SDPA floor (issue 37): time
#: within 1.3x, peak memory no more than the floor's
FLEX_TARGET, FLEX_MEMORY_TARGET = 1.3, 1.0


def medians(report: dict[str, Any] | None) -> dict[str, float]:
    """Median ms per row of a benchmark report ({} for none)."""
    return {r['encoding']: r['median_ms'] for r in report['results']} if report else {}


def ratio_text(value: float | None) -> str:
    return '-' if value is None else f'{value:.3f}'


def verdict(value: float | None, target: float, judged: bool, missing: str) -> str:
    """'met', 'NOT met', 'not judged (toy sizes)' or 'not measured (<why>)'."""
    if value is None:
        return f'not measured ({missing})'
    if not judged:
        return 'not judged (not the target setting)'
    return 'met' if value <= target else 'NOT met'


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    return lines + ['| ' + ' | '.join(row) + ' |' for row in rows]


class Summary:
    """The results of one run, by step key, and the tables drawn from them."""

    def __init__(self, plan: Plan, results: Sequence[StepResult]) -> None:
        self.plan = plan
        self.results = {r.key: r for r in results}

    def report(self, key: str) -> dict[str, Any] | None:
        result = self.results.get(key)
        return result.report if result else None

    def why_missing(self, key: str, row: str | None = None) -> str:
        """Why step ``key`` (or its row ``row``) has no figure."""
        result = self.results.get(key)
        if result is None:
            return 'not run'
        if result.status == 'done' and row is not None:
            return 'left out: see the steps' if result.note else 'not in this run'
        return f'{result.status}: see the steps'

    def ratio(self, key: str, row: str, base: str) -> float | None:
        ms = medians(self.report(key))
        return ms[row] / ms[base] if row in ms and base in ms else None

    # --- sections ----------------------------------------------------------------------------------------------
    def targets(self) -> list[str]:
        dev = 'cuda' if self.plan.device == 'cuda' else 'cpu'
        rows = []
        for key, mode in (('eager_small', 'eager'), ('compiled_small', 'compiled')):
            report = self.report(key)
            for name in self.plan.encodings:
                target = TARGETS[dev].get(name)
                if target is None:
                    continue
                value = self.ratio(key, name, BASELINE)
                judged = report is not None and target_of(report, name) is not None
                cells = [f'{name} / {BASELINE}, {mode}', ratio_text(value), f'<= {target:.2f}']
                rows.append([*cells, verdict(value, target, judged, self.why_missing(key, name))])
        report = self.report('compiled_small')
        judged = report is not None and target_of(report, 'rope_axial') is not None  # the targets' setting
        for timm_row, vispe_row, _ in self.plan.pairs:
            value = self.ratio('compiled_small', vispe_row, timm_row)
            cells = [f'{vispe_row} / {timm_row}, compiled', ratio_text(value), f'<= {VS_TIMM_TARGET:.2f}']
            rows.append([*cells, verdict(value, VS_TIMM_TARGET, judged, self.why_missing('compiled_small', vispe_row))])
        rows += self.mixed_targets() + self.throughput_target() + self.flex_targets()
        return ['## Targets', '', *table(['figure', 'ratio', 'target', 'verdict'], rows)]

    def flex_targets(self) -> list[list[str]]:
        """iRPE's FlexAttention core at the huge setting against the SDPA floor: time and peak memory."""
        if 'irpe' not in self.plan.flex_rows:
            return []
        floor = {r['encoding']: r for r in (self.report('attention_huge') or {'results': []})['results']}
        flex = {r['encoding']: r for r in (self.report('attention_huge_flex') or {'results': []})['results']}
        judged = self.plan.device == 'cuda'
        missing = self.why_missing('attention_huge_flex' if 'irpe' not in flex else 'attention_huge', 'irpe')
        rows = []
        for what, field, target in (('time', 'median_ms', FLEX_TARGET), ('peak memory', 'peak_mb', FLEX_MEMORY_TARGET)):
            value = flex['irpe'][field] / floor[SDPA_BIAS][field] if 'irpe' in flex and SDPA_BIAS in floor else None
            cells = [f'irpe on FlexAttention / {SDPA_BIAS}, {what}, attention core {self.huge_label}']
            rows.append([*cells, ratio_text(value), f'<= {target:.2f}', verdict(value, target, judged, missing)])
        return rows

    @property
    def huge_label(self) -> str:
        return self.plan.huge.label if self.plan.huge is not None else '-'

    def mixed_targets(self) -> list[list[str]]:
        report = self.report('mixed')
        if report is None:
            return [['mixed-size batches', '-', '-', f'not measured ({self.why_missing("mixed")})']]
        rows = []
        for r in report['results']:
            if r['target'] is not None:
                lo, hi = r['ratio_interval']
                result = f'{"met" if r["meets_target"] else "NOT met"} (90% interval {lo:.3f}-{hi:.3f}: {r["verdict"]})'
                rows.append(
                    [f'{r["encoding"]} {r["batch"]} / fixed', ratio_text(r['ratio']), f'<= {r["target"]}', result]
                )
        return rows

    def throughput_target(self) -> list[list[str]]:
        report = self.report('throughput')
        if report is None:
            return [['Runner / plain loop', '-', '-', f'not measured ({self.why_missing("throughput")})']]
        return [
            [
                'plain loop / Runner images/s',
                ratio_text(report['ratio']),
                f'<= {report["target"]:.2f}',
                'met' if report['met'] else 'NOT met',
            ]
        ]

    def model_level(self) -> list[str]:
        s, b = self.plan.small.label, self.plan.large.label
        keys = ('eager_small', 'compiled_small', 'eager_large', 'compiled_large')
        head = ['encoding', 'kind', f'eager {s}', f'compiled {s}', f'eager {b}', f'compiled {b}']
        head += [f'SDPA kernel (eager {s})', f'peak MB (eager {s})']
        small = {r['encoding']: r for r in (self.report('eager_small') or {'results': []})['results']}
        rows = []
        for name in dict.fromkeys([BASELINE, *self.plan.encodings]):
            ratios = [ratio_text(self.ratio(key, name, BASELINE)) for key in keys]
            row = small.get(name, {})
            peak = f'{row["peak_mb"]:.0f}' if row else '-'
            rows.append([name, encoding_kind(name), *ratios, row.get('sdpa', '-'), peak])
        intro = f'Median step time over {BASELINE}\'s (bf16 autocast, forward + backward; "-": not measured).'
        return [f'## Model level: ratio to {BASELINE}', '', intro, '', *table(head, rows)]

    def vs_timm(self) -> list[str]:
        head = ['timm', 'vispe', 'ratio eager', 'ratio compiled', 'timm ms eager', 'timm ms compiled']
        eager, compiled = medians(self.report('eager_small')), medians(self.report('compiled_small'))
        rows = []
        for timm_row, vispe_row, _ in self.plan.pairs:
            ms = [f'{m[timm_row]:.1f}' if timm_row in m else '-' for m in (eager, compiled)]
            ratios = [ratio_text(self.ratio(k, vispe_row, timm_row)) for k in ('eager_small', 'compiled_small')]
            rows.append([timm_row, vispe_row, *ratios, *ms])
        intro = f'vispe / timm median step time, {self.plan.small.label}, random init (target compiled <= 1.0).'
        return ['## vispe against timm', '', intro, '', *table(head, rows)]

    def attention(self) -> list[str]:
        s, b = self.plan.small.label, self.plan.large.label
        head = ['row', 'kind', f'/ sdpa {s}', f'/ sdpa_bias {s}', f'/ sdpa {b}', f'/ sdpa_bias {b}', 'SDPA kernel']
        kernels = {r['encoding']: r['sdpa'] for r in (self.report('attention_small') or {'results': []})['results']}
        rows = []
        for name in dict.fromkeys([SDPA, SDPA_BIAS, *self.plan.encodings]):
            ratios = [
                ratio_text(self.ratio(key, name, base))
                for key in ('attention_small', 'attention_large')
                for base in (SDPA, SDPA_BIAS)
            ]
            rows.append([name, encoding_kind(name), *ratios, kernels.get(name, '-')])
        intro = (
            'One attention layer (a model-level encoding: its hook, then the plain layer) against plain SDPA and '
            'against SDPA with a learned (1, H, N, N) bias, the floor of any bias encoding.'
        )
        return ['## Attention cores', '', intro, '', *table(head, rows)]

    def flex(self) -> list[str]:
        """Each bias encoding's attention core on SDPA and on FlexAttention against the floor, at every setting."""
        settings = (
            (self.plan.small.label, 'attention_small', 'attention_small_flex'),
            (self.plan.large.label, 'attention_large', 'attention_large_flex'),
            (self.huge_label, 'attention_huge', 'attention_huge_flex'),
        )
        head = ['row', 'SDPA / floor', 'Flex / floor', 'Flex / SDPA', 'peak MB SDPA', 'peak MB Flex', 'peak MB floor']
        rows = []
        for label, sdpa_key, flex_key in settings:
            sdpa = {r['encoding']: r for r in (self.report(sdpa_key) or {'results': []})['results']}
            flex = {r['encoding']: r for r in (self.report(flex_key) or {'results': []})['results']}
            floor = sdpa.get(SDPA_BIAS)
            for name in self.plan.flex_rows:
                s, f = sdpa.get(name), flex.get(name)
                cells = [
                    ratio_text(s['median_ms'] / floor['median_ms']) if s and floor else '-',
                    ratio_text(f['median_ms'] / floor['median_ms']) if f and floor else '-',
                    ratio_text(f['median_ms'] / s['median_ms']) if f and s else '-',
                    *(f'{r["peak_mb"]:.0f}' if r else '-' for r in (s, f, floor)),
                ]
                rows.append([f'{name}, {label}', *cells])
        intro = (
            'One attention layer: the bias materialised for SDPA against the same term added inside FlexAttention '
            f'(vispe.flex), both against the learned-bias SDPA floor ({SDPA_BIAS}); "-": not measured (the steps '
            "say why). 'auto' takes FlexAttention on CUDA from 1024 tokens: these rows say where it should."
        )
        return ['## FlexAttention against SDPA', '', intro, '', *table(head, rows)]

    def mixed(self) -> list[str]:
        report = self.report('mixed')
        if report is None:
            return []
        head = ['encoding', 'batch', 'images', 'real tokens', 'token slots', 'ratio to fixed', 'per real token']
        rows = [
            [r['encoding'], r['batch'], str(r['images']), str(r['real_tokens']), str(r['slots'])]
            + [ratio_text(r['ratio']), ratio_text(r['per_real_token'])]
            for r in report['results']
        ]
        return [f'## Mixed-size batches, {self.plan.small.label}', '', *table(head, rows)]

    def video(self) -> list[str]:
        report = self.report('video')
        if report is None or self.plan.video is None:
            return []
        head = ['encoding', 'kind', 'ratio to ape_learned', 'median ms', 'SDPA kernel', 'peak MB']
        rows = [
            [r['encoding'], encoding_kind(r['encoding']), ratio_text(r['ratio']), f'{r["median_ms"]:.1f}']
            + [r.get('sdpa', '-'), f'{r["peak_mb"]:.0f}']
            for r in report['results']
        ]
        return [f'## Video, {self.plan.video.label}', '', *table(head, rows)]

    def steps(self) -> list[str]:
        rows = [[r.key, r.title, r.status, f'{r.seconds:.0f}', r.note] for r in self.results.values()]
        return ['## Steps', '', *table(['step', 'what', 'status', 's', 'note'], rows)]


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's (toy sizes)."""
    if device == 'cuda' and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f'CPU ({platform.processor() or platform.machine()}), toy sizes'


def tests_line(result: StepResult | None) -> str:
    if result is None or result.report is None:
        return f'GPU-marked tests: {result.status if result else "not run"} {result.note if result else ""}'.rstrip()
    state = 'ok' if result.report['exit'] == 0 else f'FAILED (pytest exit {result.report["exit"]})'
    return f'GPU-marked tests: {state}, {result.report["summary"]} (OUT/tests.txt)'


#: how the summary names a compile scope (``vispe.bench.timing.compile_module``)
SCOPES = {'blocks': 'each transformer block compiled (one graph reused by all)', 'model': 'the whole model compiled'}


def summary_markdown(plan: Plan, results: Sequence[StepResult], budget_s: float, used_s: float) -> str:
    """The whole summary.md."""
    summary = Summary(plan, results)
    compile_s = [t for r in results if r.report and 'compile_s' in r.report for t in r.report['compile_s']]
    compile_line = f', median compile {statistics.median(compile_s):.0f} s a row' if compile_s else ''
    now = datetime.datetime.now().isoformat(timespec='seconds')
    header = [
        f'# GPU check: {device_name(plan.device)}',
        '',
        f'- torch {torch.__version__}, timm {timm.__version__}, {now}',
        f'- time: {used_s:.0f} s of a {budget_s:.0f} s budget{compile_line}',
        f'- compiled rows: backend {plan.compile_backend}, {SCOPES[plan.compile_scope]}',
        f'- {tests_line(summary.results.get("tests"))}',
        '- every figure: bf16 autocast, forward + backward, median over interleaved rounds, random init',
        '',
    ]
    sections = [summary.targets(), summary.model_level(), summary.vs_timm(), summary.attention(), summary.flex()]
    sections += [summary.mixed(), summary.video(), summary.steps()]
    body = [line for section in sections if section for line in [*section, '']]
    return '\n'.join(header + body)


__all__ = ['VS_TIMM_TARGET', 'Summary', 'device_name', 'summary_markdown']
