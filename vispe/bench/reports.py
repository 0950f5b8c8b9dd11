"""The benchmark's reports for people and files: the terminal tables (one size, the scaling across sizes, the
Runner-vs-loop throughput), a markdown summary of several reports, the JSON file, and the targets a caller may judge
them against."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vispe.bench.subjects import encoding_kind
from vispe.evaluation.outputs import write_json
from vispe.evaluation.report import console as report_console

#: a caller's target for one row of a report: (report, the row's encoding) -> the most its ratio may be, or None
TargetOf = Callable[[dict[str, Any], str], 'float | None']


@dataclass(frozen=True)
class Targets:
    """Ratios a caller judges the benchmark's figures against (vispe sets none): ``encoding`` for the rows of the
    encoding benchmark, ``mixed`` (device -> layout -> the most a mixed batch may cost against the fixed one) and
    ``throughput`` (the most the plain loop's images/s may exceed the Runner's by). Without one, nothing is judged
    and the tables have no target column."""

    encoding: TargetOf | None = None
    mixed: Callable[[str], Mapping[str, float]] | None = None
    throughput: float | None = None


#: how each kind of encoding's cost should grow with the token count N, against plain attention
GROWTH_EXPECTED = {
    'embed': 'proportional: one (N, D) table added to the tokens, O(N D)',
    'rotary': 'proportional: q and k rotated by (N, d) tables, O(N d); the attention stays fused',
    'value': 'proportional: a depthwise convolution of V added to the output, O(N d)',
    'bias': 'faster: an (N, N) bucket-id table and a (B, H, N, N) logit bias beside the fused kernel, O(N^2)',
    'none': 'the reference: fused SDPA alone',
    'model': "a whole model by name (timm's own or vispe's): grows as its attention and MLPs do",
}


def target_text(ratio: float, target: float | None) -> str:
    """'<= 1.05 met', '<= 1.05 NOT met', or '' without a target."""
    if target is None:
        return ''
    return f'<= {target:.2f} {"met" if ratio <= target else "NOT met"}'


# --- files and text ----------------------------------------------------------------------------------------------
def write_report(
    report: dict[str, Any], path: str | Path, run: str | None = None, kind: str = 'benchmark', force: bool | None = None
) -> Path:
    """Write the report as JSON (parent folders created, atomically) and return the path. The file is stamped with
    ``kind`` and the run's settings hash ``run``; an existing file that is not this run's report of this kind is
    refused unless ``force`` (``vispe.evaluation.outputs``: never over a non-JSON file)."""
    return Path(write_json(path, report, kind, run, force))


def config_line(report: dict[str, Any]) -> str:
    """One line naming what was run, for above the table."""
    h, w = report['img_size']
    return (
        f'model={report["model"]} img_size={h}x{w} batch={report["batch_size"]} level={report["level"]} '
        f'device={report["device"]} threads={report["threads"]} torch={report["torch"]} '
        f'warmup={report["warmup"]} repeats={report["repeats"]} amp={"bf16" if report.get("amp") else "off"} '
        f'compile={"on" if report.get("compile") else "off"}'
    )


def noise_note(report: dict[str, Any], tolerance: float = 1.2) -> str | None:
    """A warning when some row's median exceeds its min by more than ``tolerance`` (a sign of contention)."""
    worst = max(report['results'], key=lambda r: r['median_ms'] / r['min_ms'])
    spread = worst['median_ms'] / worst['min_ms']
    if spread <= tolerance:
        return None
    before, after = report['load_avg_1m']
    return (
        f'note: noisy timings: {worst["encoding"]} median is {spread:.2f}x its min (1-min load average '
        f'{before:.1f} -> {after:.1f} on {report["cpu_count"]} CPUs); rerun, or try fewer --threads'
    )


def summary_markdown(reports: Sequence[dict[str, Any]], target_of: TargetOf | None = None) -> str:
    """One markdown table of several reports of the same rows (``vispe benchmark --summarize``: e.g. 224 / 448 px,
    eager / compiled): per encoding its ratio in each report, the SDPA kernel of the first, peak MB of each and, with
    ``target_of``, the first report's target."""

    def label(report: dict[str, Any]) -> str:
        h, w = report['img_size']
        size = h if h == w else f'{h}x{w}'
        return f'{size} px{" bf16" if report.get("amp") else ""}{" compiled" if report.get("compile") else ""}'

    head = ['encoding', 'kind', *(f'ratio {label(r)}' for r in reports), *(f'MB {label(r)}' for r in reports)]
    head += ['SDPA kernel', *(['target'] if target_of else [])]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    rows = [{r['encoding']: r for r in report['results']} for report in reports]
    for name, first in rows[0].items():
        ratios = [f'{by[name]["ratio"]:.3f}' if name in by else '-' for by in rows]
        peaks = [f'{by[name]["peak_mb"]:.0f}' if name in by else '-' for by in rows]
        cells = [name, encoding_kind(name), *ratios, *peaks, first.get('sdpa', '')]
        if target_of:
            cells.append(target_text(first['ratio'], target_of(reports[0], name)))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join([config_line(reports[0]), '', *lines]) + '\n'


# --- terminal tables ---------------------------------------------------------------------------------------------
def print_report(report: dict[str, Any], target_of: TargetOf | None = None) -> None:
    """Print the configuration line, the table (encoding, median ms, min ms, ratio, peak MB, SDPA kernel, and with
    ``target_of`` the target) and any noise note."""
    from rich.table import Table

    head = ['encoding', 'median ms', 'min ms', f'ratio vs {report["baseline"]}', 'peak MB', 'SDPA kernel']
    table = Table(*head, *(['target'] if target_of else []))
    for column in table.columns[1:5]:
        column.justify = 'right'
    for r in report['results']:
        cells = [
            r['encoding'],
            f'{r["median_ms"]:.2f}',
            f'{r["min_ms"]:.2f}',
            f'{r["ratio"]:.3f}',
            f'{r["peak_mb"]:.1f}',
            r.get('sdpa', ''),
        ]
        if target_of:
            cells.append(target_text(r['ratio'], target_of(report, r['encoding'])))
        table.add_row(*cells)
    print(config_line(report))
    report_console().print(table)
    note = noise_note(report)
    if note:
        print(note)


def print_scaling(report: dict[str, Any], target_of: TargetOf | None = None) -> None:
    """The per-size tables, then one table of ratios by size and growth relative to the baseline, and what each
    kind of encoding is expected to do."""
    from rich.table import Table

    for sized in report['reports']:
        print_report(sized, target_of)
    sizes = report['sizes']
    table = Table(
        'encoding',
        'kind',
        *(f'ratio @{s}' for s in sizes),
        f'growth {sizes[0]}->{sizes[-1]} vs {report["baseline"]}',
        f'peak MB @{sizes[-1]}',
        title='scaling with resolution',
    )
    for column in table.columns[2:]:
        column.justify = 'right'
    for r in report['scaling']:
        table.add_row(
            r['encoding'],
            r['kind'],
            *(f'{x:.3f}' for x in r['ratio']),
            f'{r["growth_vs_baseline"]:.3f}',
            f'{r["peak_mb"][-1]:.1f}',
        )
    report_console().print(table)
    for kind in sorted({r['kind'] for r in report['scaling']}):
        print(f'{kind}: expected growth {GROWTH_EXPECTED[kind]}')


def throughput_config_line(report: dict[str, Any]) -> str:
    """One line naming what ``throughput.runner_vs_loop`` ran, for above its table."""
    return (
        f'config={report["config"]} batch={report["batch_size"]} device={report["device"]} '
        f'threads={report["threads"]} amp={report["amp"]} compile={report["compile"]} torch={report["torch"]} '
        f'mmengine={report["mmengine"]} warmup={report["warmup"]} iters={report["iters"]} rounds={report["rounds"]}'
    )


def print_throughput(report: dict[str, Any]) -> None:
    """Print a ``throughput.runner_vs_loop`` report: the configuration line, a table (loop, median / min / max
    images/s) and the ratio, against the report's target when it has one."""
    from rich.table import Table

    table = Table('loop', 'median images/s', 'min', 'max')
    for column in table.columns[1:]:
        column.justify = 'right'
    labels = {'runner': 'mmengine Runner', 'plain': 'plain PyTorch loop'}  # throughput.LOOPS, in order
    for name, label in labels.items():
        s = report['loops'][name]['images_per_s']
        table.add_row(label, f'{s["median"]:.1f}', f'{s["min"]:.1f}', f'{s["max"]:.1f}')
    print(throughput_config_line(report))
    report_console().print(table)
    judged = ''
    if report.get('target') is not None:
        judged = f'target <= {report["target"]:.2f}: {"met" if report["met"] else "NOT met"}; '
    print(f'ratio plain / runner = {report["ratio"]:.3f} ({judged}1.0 = no Runner overhead)')


__all__ = [
    'GROWTH_EXPECTED',
    'TargetOf',
    'Targets',
    'config_line',
    'noise_note',
    'print_report',
    'print_scaling',
    'print_throughput',
    'summary_markdown',
    'target_text',
    'throughput_config_line',
    'write_report',
]
